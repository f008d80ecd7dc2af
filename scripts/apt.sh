# shellcheck shell=bash
# apt_install PACKAGE...: installs Debian packages for scripts/test.sh and
# scripts/build-image.sh (sourced by both), as root or with sudo, quietly and
# minimally:
#   - the package index is refreshed once per run;
#   - no recommended packages (--no-install-recommends);
#   - no upgrade of installed packages that merely share a source package
#     with a new one (apt's Upgrade-By-Source-Package: podman's libsubid4
#     would otherwise upgrade the system's login and passwd);
#   - apt's and dpkg's output (some 80 lines for podman) goes to a log that
#     is printed only when the install fails.
apt_updated=0
apt_install() {
    command -v apt-get >/dev/null 2>&1 || {
        echo "$* missing and no apt-get here: install it and rerun" >&2
        return 1
    }
    local sudo="" log
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    log="$(mktemp)"
    if { [ "$apt_updated" = 1 ] || $sudo apt-get update -qq; } >"$log" 2>&1 &&
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends -o APT::Get::Upgrade-By-Source-Package=false \
            "$@" >>"$log" 2>&1; then
        apt_updated=1
        rm -f "$log"
        return 0
    fi
    echo "apt-get install $* failed; its output:" >&2
    cat "$log" >&2
    rm -f "$log"
    return 1
}
