#!/bin/sh
# docs/settings.md must document every setting declared in settings.def.
set -eu
src="$1"
missing=""
for name in $(grep -o '"GANG_[A-Z0-9_]*"' "$src/src/core/settings.def" | tr -d '"'); do
  grep -q "\`$name\`" "$src/docs/settings.md" || missing="$missing $name"
done
if [ -n "$missing" ]; then
  echo "docs/settings.md does not document:$missing"
  exit 1
fi
echo "every setting is documented"
