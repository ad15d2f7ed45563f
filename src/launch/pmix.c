/* The PMIx rendezvous (pmix.h). Compiled against PMIx's headers when the
 * build found them (GANG_HAVE_PMIX); the client library itself is opened
 * with dlopen at the first use, so nothing links against it. */
#include "launch/pmix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"

/* The key rank 0 publishes under, in the job's PMIx namespace. */
#define GANG_PMIX_KEY "gang.rendezvous"

bool gang__pmix_offered(void) {
  const char *ns = getenv("PMIX_NAMESPACE");
  const char *rank = getenv("PMIX_RANK");
  return ns != NULL && *ns != '\0' && rank != NULL && *rank != '\0';
}

#ifndef GANG_HAVE_PMIX

gang_status gang__pmix_exchange(int rank, const char *publish, char *out,
                                size_t cap, int64_t timeout_ms) {
  (void)rank;
  (void)publish;
  (void)out;
  (void)cap;
  (void)timeout_ms;
  return gang__error(GANG_NOT_SUPPORTED,
                     "this gang was built without PMIx (no libpmix-dev when "
                     "it was configured, or GANG_PMIX=OFF), so it cannot "
                     "ask the launcher's PMIx server where rank 0 is");
}

#else

#include <dlfcn.h>
#include <pmix.h>

/* The client calls used, typed from the header's own declarations. */
typedef struct pmix_api {
  __typeof__(PMIx_Init) *init;
  __typeof__(PMIx_Finalize) *finalize;
  __typeof__(PMIx_Put) *put;
  __typeof__(PMIx_Commit) *commit;
  __typeof__(PMIx_Fence) *fence;
  __typeof__(PMIx_Get) *get;
  __typeof__(PMIx_Error_string) *error_string;
  __typeof__(PMIx_Value_destruct) *value_destruct;
} pmix_api;

/* The library's soname: version 2 of the ABI, PMIx 2.x to 5.x. */
#define PMIX_LIBRARY "libpmix.so.2"

/* Opens the library once per call and leaves it open: its progress thread
 * and handlers may outlive PMIx_Finalize, so unloading it is not safe. */
static gang_status load(pmix_api *api) {
  void *h = dlopen(PMIX_LIBRARY, RTLD_NOW | RTLD_GLOBAL);
  if (h == NULL)
    return gang__error(GANG_NOT_SUPPORTED,
                       "PMIx: cannot open %s (%s): install PMIx's client "
                       "library (Debian: libpmix2)",
                       PMIX_LIBRARY, dlerror());
  struct {
    const char *name;
    void **slot;
  } syms[] = {
      {"PMIx_Init", (void **)&api->init},
      {"PMIx_Finalize", (void **)&api->finalize},
      {"PMIx_Put", (void **)&api->put},
      {"PMIx_Commit", (void **)&api->commit},
      {"PMIx_Fence", (void **)&api->fence},
      {"PMIx_Get", (void **)&api->get},
      {"PMIx_Error_string", (void **)&api->error_string},
      {"PMIx_Value_destruct", (void **)&api->value_destruct},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(h, syms[i].name);
    if (*syms[i].slot == NULL)
      return gang__error(GANG_NOT_SUPPORTED, "PMIx: %s has no %s", PMIX_LIBRARY,
                         syms[i].name);
  }
  return GANG_OK;
}

static gang_status refused(const pmix_api *api, const char *what,
                           pmix_status_t rc) {
  return gang__error(GANG_SYSTEM, "PMIx: %s failed: %s (%d)", what,
                     api->error_string(rc), (int)rc);
}

static void info_set(pmix_info_t *i, const char *key) {
  memset(i, 0, sizeof *i);
  snprintf(i->key, sizeof i->key, "%s", key);
}

gang_status gang__pmix_exchange(int rank, const char *publish, char *out,
                                size_t cap, int64_t timeout_ms) {
  pmix_api api;
  GANG_CHECK(load(&api));
  pmix_proc_t me;
  memset(&me, 0, sizeof me);
  pmix_status_t rc = api.init(&me, NULL, 0);
  if (rc != PMIX_SUCCESS)
    return gang__error(GANG_SYSTEM,
                       "PMIx: PMIx_Init failed: %s (%d): PMIX_NAMESPACE and "
                       "PMIX_RANK are set, but the launcher's PMIx server "
                       "does not answer",
                       api.error_string(rc), (int)rc);
  gang_status st = GANG_OK;
  pmix_value_t *got = NULL;
  if ((int64_t)me.rank != rank) {
    st = gang__error(GANG_INVALID_ARGUMENT,
                     "PMIx says this is rank %u of namespace %s, the "
                     "environment says rank %d: the gang's world is not the "
                     "launcher's job",
                     (unsigned)me.rank, me.nspace, rank);
    goto done;
  }
  if (publish != NULL) {
    pmix_value_t v;
    memset(&v, 0, sizeof v);
    v.type = PMIX_STRING;
    v.data.string = (char *)publish;
    rc = api.put(PMIX_GLOBAL, GANG_PMIX_KEY, &v);
    if (rc != PMIX_SUCCESS) {
      st = refused(&api, "PMIx_Put", rc);
      goto done;
    }
    rc = api.commit();
    if (rc != PMIX_SUCCESS) {
      st = refused(&api, "PMIx_Commit", rc);
      goto done;
    }
  }
  /* Every process of the job, with the data they published. */
  pmix_proc_t all;
  memset(&all, 0, sizeof all);
  memcpy(all.nspace, me.nspace, sizeof all.nspace);
  all.rank = PMIX_RANK_WILDCARD;
  int secs = timeout_ms <= 0 ? 0 : (int)((timeout_ms + 999) / 1000);
  pmix_info_t info[2];
  info_set(&info[0], PMIX_COLLECT_DATA);
  info[0].value.type = PMIX_BOOL;
  info[0].value.data.flag = true;
  info_set(&info[1], PMIX_TIMEOUT);
  info[1].value.type = PMIX_INT;
  info[1].value.data.integer = secs;
  rc = api.fence(&all, 1, info, 2);
  if (rc == PMIX_ERR_TIMEOUT) {
    st = gang__error(GANG_TIMEOUT,
                     "PMIx: not every rank of job %s reached the rendezvous "
                     "within %d s",
                     me.nspace, secs);
    goto done;
  }
  if (rc != PMIX_SUCCESS) {
    st = refused(&api, "PMIx_Fence", rc);
    goto done;
  }
  pmix_proc_t root;
  memset(&root, 0, sizeof root);
  memcpy(root.nspace, me.nspace, sizeof root.nspace);
  root.rank = 0;
  rc = api.get(&root, GANG_PMIX_KEY, NULL, 0, &got);
  if (rc != PMIX_SUCCESS) {
    st = gang__error(GANG_SYSTEM,
                     "PMIx: rank 0 of job %s published no '%s' (%s): does "
                     "every rank run this gang program?",
                     me.nspace, GANG_PMIX_KEY, api.error_string(rc));
    goto done;
  }
  if (got->type != PMIX_STRING || got->data.string == NULL ||
      strlen(got->data.string) >= cap) {
    st = gang__error(GANG_SYSTEM,
                     "PMIx: rank 0's '%s' is not a string of under %zu "
                     "bytes",
                     GANG_PMIX_KEY, cap);
    goto done;
  }
  snprintf(out, cap, "%s", got->data.string);
  GANG_INFO(LAUNCH, "PMIx: rank %d of job %s met rank 0 through the launcher",
            rank, me.nspace);
done:
  if (got != NULL) {
    api.value_destruct(got);
    free(got);
  }
  rc = api.finalize(NULL, 0);
  if (st == GANG_OK && rc != PMIX_SUCCESS)
    st = refused(&api, "PMIx_Finalize", rc);
  return st;
}

#endif
