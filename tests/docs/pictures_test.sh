#!/usr/bin/env bash
# Fails when a picture of docs/ is stale or unrecorded: scripts/picture_manifest.py check compares
# each picture, and each script and data file it was made from, with docs/pictures.json.
set -euo pipefail
exec /usr/bin/python3 scripts/picture_manifest.py check
