/* Replays a fuzz target's corpus without libFuzzer: calls
 * LLVMFuzzerTestOneInput on every file named on the command line (or every
 * file in the directories named), so the corpus runs as a regular test under
 * any compiler and sanitizer. Exits 0 when every input was processed. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    perror(path);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
  size_t got = buf ? fread(buf, 1, (size_t)(n > 0 ? n : 0), f) : 0;
  fclose(f);
  if (buf == NULL)
    return 1;
  LLVMFuzzerTestOneInput(buf, got);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int count = 0, bad = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      perror(argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      bad |= run_file(argv[i]);
      count++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.')
        continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
      bad |= run_file(path);
      count++;
    }
    if (d)
      closedir(d);
  }
  printf("replayed %d inputs\n", count);
  return bad || count == 0;
}
