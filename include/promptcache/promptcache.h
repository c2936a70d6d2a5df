// promptcache's whole public C++ API in one include: the Engine (promptcache/engine.h), its
// options (engine_options.h), completion requests and results (completion.h), embeddings
// (embedding.h), cache listings (cache_info.h), statistics (engine_stats.h), schema loading and
// PromptBuilder (schema.h), text to tokens and back (text.h), Status/Result (status.h), sampling
// parameters (sampling.h), the KV element type (types.h), PML prompts and schema layouts
// (pml.h), and the library's version (version.h). docs/library.md shows how to build against
// the installed library.
#pragma once

#include "promptcache/cache_info.h"
#include "promptcache/completion.h"
#include "promptcache/embedding.h"
#include "promptcache/engine.h"
#include "promptcache/engine_options.h"
#include "promptcache/engine_stats.h"
#include "promptcache/pml.h"
#include "promptcache/sampling.h"
#include "promptcache/schema.h"
#include "promptcache/status.h"
#include "promptcache/text.h"
#include "promptcache/types.h"
#include "promptcache/version.h"
