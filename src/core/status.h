// Status and Result<T>: how every fallible operation in promptcache reports failure.
//
// Parsers and loaders of untrusted input (GGUF files, XML, JSON, CLI flags) return a Status or a
// Result instead of throwing, so that a bad file ends in one clear line, never a crash. Broken
// internal invariants are different: they abort through PC_CHECK (check.h).
//
// The types are part of the public API and defined there (include/promptcache/status.h); this
// header adds PC_CHECK for the engine's own code.
#pragma once

#include "core/check.h"
#include "promptcache/status.h"
