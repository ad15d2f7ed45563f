/* gang-baby: the child process of a subprocess gang (gang_baby_create in
 * gang/ft.h). The library starts it; what it does lives in the library
 * (src/ft/baby_child.c), beside the parent's half of the protocol. */
#include "ft/baby.h"

int main(int argc, char **argv) { return gang__baby_child_main(argc, argv); }
