/* Fuzz target for the Slurm hostlist and tasks-per-node parsers: any bytes
 * must give a clean status (no crash, leak or overread), a successful
 * expansion must respect the caps, and the first host must agree with the
 * full expansion. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "launch/hostlist.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096)
    return 0;
  char *text = malloc(size + 1);
  if (text == NULL)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';

  /* A small cap keeps each run fast while still reaching the cap checks. */
  gang__hostlist list;
  char first[GANG__HOST_NAME_MAX + 1];
  gang_status st = gang__hostlist_expand("F", text, 4096, &list);
  gang_status st1 = gang__hostlist_first("F", text, first, sizeof first);
  if (st == GANG_OK) {
    if (list.n == 0 || list.n > 4096 || st1 != GANG_OK ||
        strcmp(first, list.hosts[0]) != 0)
      abort();
    for (size_t i = 0; i < list.n; i++) {
      size_t n = strlen(list.hosts[i]);
      if (n == 0 || n > GANG__HOST_NAME_MAX)
        abort();
    }
    gang__hostlist_free(&list);
  } else if (st != GANG_INVALID_ARGUMENT && st != GANG_NO_MEMORY) {
    abort();
  }

  int count = 0;
  int index = size > 0 ? data[0] % 8 : 0;
  st = gang__tasks_per_node("F", text, index, &count);
  if (st == GANG_OK && count <= 0)
    abort();
  free(text);
  return 0;
}
