#!/usr/bin/env bash
# Install what the dashboard's browser test needs, only where it is
# missing: Debian's chromium (the headless browser the test drives) and
# chromium-driver (its WebDriver, for anyone driving it with Selenium).
set -eu
say() { printf 'browser-deps: %s\n' "$*" >&2; }
sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
