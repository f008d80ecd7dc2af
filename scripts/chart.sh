#!/usr/bin/env bash
# The Helm chart (charts/deletion-cost-operator) through Helm's own Go library,
# which the Python package helm-sdkpy bundles (no helm binary needed):
#
#   scripts/chart.sh test                 lint, refusals, the render against the
#                                         kustomize overlays, the package (CI)
#   scripts/chart.sh template RELEASE -n NS [-f values.yaml] [--set k=v]
#   scripts/chart.sh lint [-f values.yaml]
#   scripts/chart.sh package [DIR]        DIR/deletion-cost-operator-VERSION.tgz
#                                         (default DIR: target/chart)
#   scripts/chart.sh install RELEASE -n NS [--create-namespace] [-f ...] [--set ...]
#                                         [--force-conflicts] (over a CRD an earlier
#                                         `kubectl apply` left, as Helm 4's flag)
#   scripts/chart.sh upgrade RELEASE -n NS [-f ...] [--set ...] [--force-conflicts]
#   scripts/chart.sh uninstall RELEASE -n NS
#                                         against the cluster KUBECONFIG names
#   scripts/chart.sh readme-table [--write]
#
# Installs what it needs with pip when missing: helm-sdkpy 0.1.32 (it declares
# Python 3.12 but loads on 3.11, hence --ignore-requires-python) and PyYAML.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

HELM_SDKPY_VERSION=0.1.32
# The package ships Helm's library for linux-amd64 only.
if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
    echo "chart: helm-sdkpy $HELM_SDKPY_VERSION ships Helm's library for Linux x86_64 only, not $(uname -s)-$(uname -m)" >&2
    exit 1
fi
python="${PYTHON:-python3}"
command -v "$python" >/dev/null 2>&1 || {
    echo "chart: $python not found: Python 3.11 or newer is needed" >&2
    exit 1
}
pip_install() {
    echo "chart: installing $* (pip)" >&2
    "$python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --ignore-requires-python "$@" >&2
}
"$python" -c 'import yaml' 2>/dev/null || pip_install pyyaml
installed="$("$python" -c 'import importlib.metadata as m; print(m.version("helm-sdkpy"))' 2>/dev/null || true)"
if [ "$installed" != "$HELM_SDKPY_VERSION" ]; then
    pip_install "helm-sdkpy==$HELM_SDKPY_VERSION"
fi
exec "$python" scripts/chart.py "$@"
