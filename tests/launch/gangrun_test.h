/* Helpers of the gangrun tests (gangrun_test.c). */
#ifndef GANG_TESTS_GANGRUN_TEST_H
#define GANG_TESTS_GANGRUN_TEST_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define TIMEOUT_MS 30000

/* The built gangrun (main sets it). */
extern char *gangrun_path;

int64_t now_ms(void);
char *make_dir(void);
void remove_dir(char *d);
int read_int_file(const char *dir, const char *what, int rank);
bool pid_gone(int pid);
void assert_workers_gone(const char *dir, int n);
int count_pid_files(const char *dir, int n);
void gangrun_argv(char *argv[64], const char *flag, va_list ap);
int run(char **out, const char *const *env, ...);
int exit_code(int st);
void must_contain(const char *out, const char *what);
void must_not_contain(const char *out, const char *what);
char *env_at(const char *out, const char *who, const char *name);
char *env_of(const char *out, int rank, const char *name);
bool port_free(int port);
int free_port_pair(void);
pid_t spawn_node0(const char *const *env, ...);
/* Unsets every variable of an enclosing launcher or job script. */
void gr_hermetic(void);

#endif
