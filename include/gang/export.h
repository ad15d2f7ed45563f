/* gang/export.h: the one export macro. The library is built with hidden
 * visibility; only declarations marked GANG_API are part of the ABI. */
#ifndef GANG_EXPORT_H
#define GANG_EXPORT_H

#if defined(GANG_BUILDING) && defined(__GNUC__)
#define GANG_API __attribute__((visibility("default")))
#else
#define GANG_API
#endif

#if defined(__GNUC__)
#define GANG_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define GANG_PRINTF(fmt, args)
#endif

#endif
