#!/bin/sh
# Fails if the source files behind a set of object files call each other
# in a circle: file A uses a global that file B defines, B (directly or
# through others) one that A defines. Each file's calls go one way, so a
# file can be read, tested and replaced from the bottom up
# (docs/architecture.md). The edges come from the objects' own symbol
# tables (nm), so a call through a header's inline function or a macro
# counts where the compiler put it.
#
#   check_call_circles.sh NAME OBJECT...
#
# prints each edge "A -> B" of a circle it finds, and the circle.
set -eu
name="$1"
shift
[ "$#" -gt 0 ] || { echo "$name: no object files given"; exit 1; }
tmp=$(mktemp -d /tmp/gang-circles.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# "object symbol" for what each object defines and what it leaves undefined.
# Object paths are shortened to their source path (.../CMakeFiles/x.dir/
# src/gang/pg.c.o -> src/gang/pg.c).
short() { sed -e 's#^.*\.dir/##' -e 's#\.o # #'; }
for o in "$@"; do
  [ -f "$o" ] || { echo "$name: no object file $o"; exit 1; }
done
# One nm over every object (-A: each line starts with "object: ").
nm -P -A --defined-only -g "$@" | sed 's/: / /' | awk '{print $1, $2}' \
  | short >"$tmp/defs"
nm -P -A -u "$@" | sed 's/: / /' | awk '{print $1, $2}' | short >"$tmp/uses"

ndefs=$(wc -l <"$tmp/defs")
[ "$ndefs" -gt 0 ] || { echo "$name: the objects define nothing"; exit 1; }

# "caller callee symbol"; a symbol defined twice (a weak default and its
# override) gives no edge.
awk 'NR == FNR {n[$2]++; at[$2] = $1; next}
     n[$2] == 1 && at[$2] != $1 {print $1, at[$2], $2}' \
  "$tmp/defs" "$tmp/uses" | sort -u >"$tmp/edges"
nedges=$(wc -l <"$tmp/edges")

# tsort names the members of a loop when it finds one.
if awk '{print $1, $2}' "$tmp/edges" | tsort >/dev/null 2>"$tmp/loop"; then
  echo "$name: $# files, $nedges calls between files, no circle"
  exit 0
fi
echo "$name: the files call each other in a circle:"
sed -n 's/^tsort: //p' "$tmp/loop" | grep -v 'input contains a loop' \
  | sort -u >"$tmp/members" || true
cat "$tmp/members"
echo "the calls among them (caller -> callee: symbol):"
awk 'NR == FNR {m[$1] = 1; next} ($1 in m) && ($2 in m) {
       print "  " $1 " -> " $2 ": " $3 }' "$tmp/members" "$tmp/edges"
exit 1
