// The carrier of the precompiled headers (cmake/Precompile.cmake): it has no code of its own.
