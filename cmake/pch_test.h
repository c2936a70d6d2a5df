// The headers precompiled for the tests (cmake/Precompile.cmake): cmake/pch.h's and GoogleTest.
#include "cmake/pch.h"

#include <gtest/gtest.h>
