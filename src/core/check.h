// PC_CHECK: internal invariants that abort the process when broken.
//
// Used only for programming errors (a bug in promptcache itself). Anything a user or a file can
// get wrong goes through Status (status.h) instead.
#pragma once

#include <cstdio>
#include <cstdlib>

#define PC_CHECK(cond)                                                                    \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "promptcache: internal check failed at %s:%d: %s\n", __FILE__, \
                   __LINE__, #cond);                                                      \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

#ifdef NDEBUG
#define PC_DCHECK(cond) \
  do {                  \
  } while (0)
#else
#define PC_DCHECK(cond) PC_CHECK(cond)
#endif
