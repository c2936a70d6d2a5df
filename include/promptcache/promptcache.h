// promptcache's whole public C++ API in one include: the Engine and its requests
// (promptcache/engine.h), text to tokens and back (text.h), Status/Result (status.h), sampling
// parameters (sampling.h), the KV element type (types.h), PML prompts and schema layouts
// (pml.h), and the library's version (version.h). docs/library.md shows how to build against
// the installed library.
#pragma once

#include "promptcache/engine.h"
#include "promptcache/pml.h"
#include "promptcache/sampling.h"
#include "promptcache/status.h"
#include "promptcache/text.h"
#include "promptcache/types.h"
#include "promptcache/version.h"
