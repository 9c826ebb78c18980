# Sourced by the build scripts: narwhal_configure BUILD_DIR [cmake arguments]
# configures a build folder with Ninja when it is installed (it keeps both
# cores busy across targets, where make waits for each target's libraries),
# Unix Makefiles otherwise. A folder configured earlier with another
# generator or another C++ compiler has its CMake cache dropped first, since
# CMake cannot switch either in place.
narwhal_configure() {
  local build="$1"
  shift
  local generator="Unix Makefiles"
  if command -v ninja >/dev/null; then generator="Ninja"; fi
  local cxx="" arg
  for arg in "$@"; do
    case "$arg" in -DCMAKE_CXX_COMPILER=*) cxx="$(command -v "${arg#*=}" || true)" ;; esac
  done
  local cache="$build/CMakeCache.txt"
  if [[ -f "$cache" ]]; then
    local had_generator had_cxx
    had_generator="$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$cache")"
    had_cxx="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$cache")"
    if [[ "$had_generator" != "$generator" ]] ||
       [[ -n "$cxx" && -n "$had_cxx" && "$(readlink -f "$had_cxx")" != "$(readlink -f "$cxx")" ]]; then
      echo "configure: $build was configured for $had_generator with ${had_cxx:-the default compiler};" \
           "starting it again for $generator${cxx:+ with $cxx}" >&2
      rm -rf "$cache" "$build/CMakeFiles"
    fi
  fi
  cmake -G "$generator" -S "$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)" -B "$build" "$@" >/dev/null
}
