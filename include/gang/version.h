/* gang/version.h: the one source of the version. CMake reads the three
 * numbers below; gang_version() returns them at run time. */
#ifndef GANG_VERSION_H
#define GANG_VERSION_H

#include "gang/export.h"

#define GANG_VERSION_MAJOR 0
#define GANG_VERSION_MINOR 1
#define GANG_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version as MAJOR*10000 + MINOR*100 + PATCH, so a program
 * can compare the header it was built with against the library it loaded.
 * Cannot fail; thread-safe. */
GANG_API int gang_version(void);

/* The version as "MAJOR.MINOR.PATCH". Static storage; thread-safe. */
GANG_API const char *gang_version_string(void);

#ifdef __cplusplus
}
#endif
#endif
