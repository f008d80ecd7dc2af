#!/usr/bin/env python3
"""The Helm chart (charts/deletion-cost-operator) through Helm's own Go
library, as the Python package helm-sdkpy bundles it (no helm binary).
Run it through scripts/chart.sh, which installs that package when missing.

  test                      lint, refusals, the render compared with the
                            kustomize overlays, the package, the README table
  template RELEASE          print what an install would create (rendered by
                            Helm's Install against an in-process stand-in for
                            the API server: the library has no dry run)
  lint [-f FILE]...         helm lint
  package [DIR]             helm package: DIR/deletion-cost-operator-VERSION.tgz
  install RELEASE / upgrade RELEASE / uninstall RELEASE
                            the release actions against the cluster KUBECONFIG
                            names (server-side apply, as Helm 4's CLI)
  readme-table [--write]    the chart README's values table, from the schema

Values: -f FILE (repeatable, merged as Helm merges them) and --set a.b=VALUE
(VALUE read as YAML).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "deletion-cost-operator"
CHART_NAME = "deletion-cost-operator"


def log(msg: str) -> None:
    print(f"chart: {msg}", file=sys.stderr, flush=True)


def die(msg: str) -> None:
    print(f"chart: FAILED: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def helm():
    """The library, loaded on first use."""
    import helm_sdkpy

    return helm_sdkpy


def crate_version() -> str:
    text = (REPO / "Cargo.toml").read_text()
    # the crates share the workspace's version ([workspace.package])
    for section in ("[package]", "[workspace.package]"):
        if section not in text:
            continue
        body = text.split(section, 1)[1].split("\n[", 1)[0]
        m = re.search(r'^version\s*=\s*"([^"]+)"', body, re.M)
        if m:
            return m.group(1)
    die("no version in Cargo.toml's [package] or [workspace.package]")


# ----------------------------------------------------------------- values


def merge(base: Any, over: Any) -> Any:
    """Helm's merge of values files: maps merge key by key, anything else is
    replaced; a null removes the key."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = merge(out.get(k), v)
        return out
    return copy.deepcopy(over)


def set_path(values: dict, assignment: str) -> None:
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        die(f"--set {assignment!r}: expected KEY=VALUE")
    node = values
    parts = key.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            die(f"--set {key}: {p} is not a map")
    node[parts[-1]] = yaml.safe_load(raw) if raw != "" else ""


def user_values(files: list[str], sets: list[str]) -> dict:
    values: dict = {}
    for f in files:
        loaded = yaml.safe_load(Path(f).read_text()) or {}
        if not isinstance(loaded, dict):
            die(f"{f}: not a map of values")
        values = merge(values, loaded)
    for s in sets:
        set_path(values, s)
    return values


def default_values() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())


# Every optional piece on: the overlays with every component.
ALL_ON = {
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {"enabled": True},
    # the API server's addresses, set in the networkpolicy component's
    # api-server.env for the overlays (a documentation address)
    "networkPolicy": {"enabled": True, "apiServerCIDRs": ["192.0.2.1/32"]},
    "flowControl": {"enabled": True},
    "certManager": {"enabled": True},
    "podDisruptionBudget": {"enabled": True},
    "scaleWebhook": {"enabled": True},
    "prices": {"enabled": True},
}

# Every other switch and setting away from its default: linted and rendered
# (no overlay to compare with).
EVERY_SWITCH = merge(
    ALL_ON,
    {
        "replicaCount": 3,
        "leaderElection": {"leaseName": "dc", "leaseDuration": 20, "renewDeadline": 12.5, "retryPeriod": 1.5},
        "image": {
            "repository": "registry.example/deletion-cost-operator",
            "digest": "sha256:" + "ab" * 32,
            "pullPolicy": "Always",
        },
        "imagePullSecrets": [{"name": "regcred"}],
        "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"cpu": 2, "memory": "1Gi"}},
        "operator": {
            "prometheusUrl": "http://prometheus.example:9090",
            "prometheusTimeout": 2.5,
            "qps": 7.5,
            "burst": 100000,
            "logFormat": "text",
            "shutdownGrace": 25,
            "dryRun": True,
            "featureGates": "PodDeletionCost=true,LogarithmicScaleDown=false",
            "kubernetesVersion": "1.36",
            "metricsPort": 9090,
        },
        "hook": {"port": 9443, "tokenAudiences": ["deletion-cost", "other"], "settleDelay": 0.5, "maxConcurrent": 8},
        "terminationGracePeriodSeconds": 40,
        "podAntiAffinity": "required",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}],
        "priorityClassName": "system-cluster-critical",
        "podLabels": {"team": "platform"},
        "podAnnotations": {"example.com/note": "yes"},
        "commonLabels": {"example.com/owner": "platform"},
        "podDisruptionBudget": {"minAvailable": 2},
        "serviceMonitor": {"interval": "15s", "labels": {"release": "prometheus"}},
        "prometheusRule": {"labels": {"release": "prometheus"}},
        "networkPolicy": {
            "prescaleClientLabels": {"example.com/scaler": "yes"},
            "metricsNamespace": "observability",
            "apiServerCIDRs": ["10.0.0.10/32", "fd00::10/128"],
        },
        "scaleWebhook": {"port": 9444, "clientCA": {"configMap": "apiserver-webhook-ca", "names": ["kube-apiserver", "apiserver.example"]}},
        "flowControl": {
            "matchingPrecedence": 800,
            "nominalConcurrencyShares": 20,
            "lendablePercent": 0,
            "queues": 8,
            "handSize": 2,
            "queueLengthLimit": 10,
        },
        "certManager": {"issuerRef": {"kind": "ClusterIssuer", "name": "corp-ca"}, "duration": "720h", "renewBefore": "240h"},
        "prices": {"file": "billingClasses: {spot: 0.05}\n", "nodeRemovalWindow": 600},
    },
)


# ------------------------------------------------- the API server stand-in

# Kinds the stand-in serves: (group/version, plural, kind, namespaced).
SERVED = [
    ("v1", "namespaces", "Namespace", False),
    ("v1", "secrets", "Secret", True),
    ("v1", "configmaps", "ConfigMap", True),
    ("v1", "serviceaccounts", "ServiceAccount", True),
    ("v1", "services", "Service", True),
    ("apps/v1", "deployments", "Deployment", True),
    ("rbac.authorization.k8s.io/v1", "roles", "Role", True),
    ("rbac.authorization.k8s.io/v1", "rolebindings", "RoleBinding", True),
    ("rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", False),
    ("rbac.authorization.k8s.io/v1", "clusterrolebindings", "ClusterRoleBinding", False),
    ("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", True),
    ("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", True),
    ("flowcontrol.apiserver.k8s.io/v1", "flowschemas", "FlowSchema", False),
    ("flowcontrol.apiserver.k8s.io/v1", "prioritylevelconfigurations", "PriorityLevelConfiguration", False),
    ("apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", False),
    ("deletioncost.dev/v1alpha1", "deletioncostpolicies", "DeletionCostPolicy", True),
    ("monitoring.coreos.com/v1", "servicemonitors", "ServiceMonitor", True),
    ("monitoring.coreos.com/v1", "prometheusrules", "PrometheusRule", True),
    ("cert-manager.io/v1", "issuers", "Issuer", True),
    ("cert-manager.io/v1", "certificates", "Certificate", True),
    ("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", False),
]


PLURALS = {plural for _, plural, _, _ in SERVED}


def is_collection(path: str) -> bool:
    """/api/v1/PLURAL, /apis/G/V/PLURAL and their namespaced forms."""
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) == 3:
        rest = rest[2:]
    return len(rest) == 1 and rest[0] in PLURALS


class StandIn:
    """Just enough of an API server for Helm's Install to run to its end:
    version and discovery for the kinds above, 404 for every object, empty
    lists, and every write recorded and echoed. What Helm writes is what an
    install would send to a real cluster."""

    def __init__(self, version: str = "1.36"):
        self.writes: list[tuple[str, str, Any]] = []
        self.lock = threading.Lock()
        major, minor = version.split(".")
        groups: dict[str, list] = {}
        for gv, plural, kind, namespaced in SERVED:
            groups.setdefault(gv, []).append(
                {
                    "name": plural,
                    "singularName": kind.lower(),
                    "namespaced": namespaced,
                    "kind": kind,
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                }
            )
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body in separate writes: without this, each
            # answer waits for the client's delayed ACK (40 ms)
            disable_nagle_algorithm = True

            def send(self, code: int, obj: Any) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def handle_any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                if path == "/version":
                    return self.send(200, {"major": major, "minor": minor, "gitVersion": f"v{version}.0"})
                if path == "/api":
                    return self.send(200, {"kind": "APIVersions", "versions": ["v1"]})
                if path == "/apis":
                    return self.send(
                        200,
                        {
                            "kind": "APIGroupList",
                            "apiVersion": "v1",
                            "groups": [
                                {
                                    "name": gv.split("/")[0],
                                    "versions": [{"groupVersion": gv, "version": gv.split("/")[1]}],
                                    "preferredVersion": {"groupVersion": gv, "version": gv.split("/")[1]},
                                }
                                for gv in groups
                                if "/" in gv
                            ],
                        },
                    )
                gv = path[len("/api/") :] if path.startswith("/api/") else path[len("/apis/") :]
                if gv in groups:
                    return self.send(
                        200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": groups[gv]}
                    )
                if self.command in ("POST", "PUT", "PATCH"):
                    try:
                        obj = json.loads(body)
                    except ValueError:
                        obj = yaml.safe_load(body)
                    with stand_in.lock:
                        stand_in.writes.append((self.command, path, obj))
                    if obj.get("kind") == "CustomResourceDefinition":
                        obj = dict(obj, status={"conditions": [{"type": "Established", "status": "True"}, {"type": "NamesAccepted", "status": "True"}]})
                    return self.send(201, obj)
                if self.command == "GET" and is_collection(path):
                    return self.send(200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": []})
                self.send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def kubeconfig(self) -> str:
        port = self.server.server_address[1]
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "stand-in", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "stand-in", "user": {"token": "stand-in"}}],
                "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "stand-in"}}],
                "current-context": "stand-in",
            }
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Render:
    """What Helm's Install sent: the chart's objects, the CRDs from crds/,
    the release's notes."""

    def __init__(self, objects: list[dict], crds: list[dict], notes: str, manifest: str):
        self.objects = objects
        self.crds = crds
        self.notes = notes
        self.manifest = manifest


def template(release: str, namespace: str, values: dict, chart: str | None = None) -> Render:
    """Helm's Install of the chart against the stand-in (HELM_DRIVER=memory:
    no release Secret); raises the library's InstallError when Helm refuses."""
    h = helm()
    stand_in = StandIn()
    try:
        config = h.Configuration(namespace=namespace, kubeconfig=stand_in.kubeconfig())
        result = asyncio.run(
            h.Install(config).run(
                release,
                chart or str(CHART),
                values=values or None,
                wait=False,
                timeout=60,
                server_side_apply=True,
            )
        )
    finally:
        stand_in.close()
    objects, crds = [], []
    for _method, _path, obj in stand_in.writes:
        (crds if obj.get("kind") == "CustomResourceDefinition" else objects).append(obj)
    return Render(objects, crds, result.get("info", {}).get("notes", ""), result.get("manifest", ""))


# ------------------------------------------------------------------- lint


def lint(values: dict | None = None, chart: Path = CHART) -> list[tuple[int, str]]:
    """helm lint of the chart with `values` over its defaults. The library's
    Lint takes no values, so a copy of the chart with those values as its
    values.yaml is linted. Returns (severity, path) of every message:
    1 info, 2 warning, 3 error (the library drops the messages' text)."""
    h = helm()
    with tempfile.TemporaryDirectory(prefix="chart-lint-") as tmp:
        target = chart
        if values:
            target = Path(tmp) / CHART_NAME
            shutil.copytree(chart, target)
            merged = merge(default_values(), values)
            (target / "values.yaml").write_text(yaml.safe_dump(merged, sort_keys=False))
        result = asyncio.run(h.Lint(h.Configuration(namespace="default")).run(str(target)))
    return [(m.get("Severity", 0), m.get("Path", "")) for m in result.get("Messages") or []]


# --------------------------------------------------------- the comparison


def kustomize(dir_: Path) -> list[dict]:
    out = subprocess.run(["kubectl", "kustomize", str(dir_)], capture_output=True, text=True)
    if out.returncode != 0:
        die(f"kubectl kustomize {dir_}: {out.stderr.strip()}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


COMPONENTS = ["cert-manager", "flowcontrol", "networkpolicy", "servicemonitor", "alerts", "scale-webhook", "prices"]


def overlay_objects(overlay: str, components: list[str], scratch: Path) -> list[dict]:
    if not components:
        return kustomize(REPO / "deploy" / "overlays" / overlay)
    base = kustomize(REPO / "deploy" / "overlays" / overlay)
    namespace = next(o["metadata"]["namespace"] for o in base if o["kind"] == "ServiceAccount")
    d = scratch / f"{overlay}-{'-'.join(components)}"
    d.mkdir(parents=True, exist_ok=True)
    up = os.path.relpath(REPO, d)
    paths = []
    for c in components:
        if c == "networkpolicy":
            # rendered only with the API server's addresses set, as a user
            # sets them: api-server.env in their copy of the component
            copy_dir = d / c
            shutil.copytree(REPO / "deploy" / "components" / c, copy_dir, dirs_exist_ok=True)
            with open(copy_dir / "api-server.env", "a") as env:
                env.write(f"apiServerCIDR={ALL_ON['networkPolicy']['apiServerCIDRs'][0]}\n")
            paths.append(c)
        else:
            paths.append(f"{up}/deploy/components/{c}")
    (d / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"namespace: {namespace}\nresources:\n  - {up}/deploy/overlays/{overlay}\ncomponents:\n"
        + "".join(f"  - {p}\n" for p in paths)
    )
    return kustomize(d)


CLUSTER_SCOPED = {kind for _, _, kind, namespaced in SERVED if not namespaced}


def key(obj: dict) -> tuple[str, str, str]:
    """(kind, namespace, name); a cluster-scoped object has no namespace,
    whatever its metadata says."""
    m = obj.get("metadata", {})
    kind = obj.get("kind", "")
    namespace = "" if kind in CLUSTER_SCOPED else m.get("namespace", "") or ""
    return (kind, namespace, m.get("name", ""))


def diff(path: str, a: Any, b: Any, out: list[tuple[str, Any, Any]]) -> None:
    """Every leaf where a (the overlay's) and b (the chart's) differ."""
    if isinstance(a, dict) and b is MISSING:
        b = {}
    if isinstance(b, dict) and a is MISSING:
        a = {}
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            diff(f"{path}.{k}" if path else k, a.get(k, MISSING), b.get(k, MISSING), out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            diff(f"{path}[{i}]", x, y, out)
    elif a != b:
        out.append((path, a, b))


class _Missing:
    def __repr__(self) -> str:
        return "(absent)"


MISSING = _Missing()

# The binary's defaults the chart writes out as flags where the overlays
# leave them to the binary (tests/chart.rs checks they are the defaults).
EXPLICIT_DEFAULT_FLAGS = [
    "--lease-duration=15",
    "--renew-deadline=10",
    "--retry-period=2",
    "--prometheus-timeout=10",
    "--shutdown-grace=20",
    "--hook-settle-delay=1",
    "--hook-max-concurrent=4",
    "--hook-source-qps=10",
    "--hook-source-burst=20",
    "--scale-webhook-budget=2.5",
]

def intended(release: str, namespace: str, version: str) -> list[tuple[str, str, Any, Any]]:
    """The differences between the chart and the overlays that are meant:
    (why, path pattern, overlay's value, chart's value). Every one must be
    seen in the comparison, and nothing else may differ."""
    return [
        ("Helm's standard labels", r"metadata\.labels\.app\.kubernetes\.io/instance", MISSING, release),
        ("Helm's standard labels", r"metadata\.labels\.app\.kubernetes\.io/version", MISSING, version),
        ("Helm's standard labels", r"metadata\.labels\.app\.kubernetes\.io/managed-by", MISSING, "Helm"),
        ("Helm's standard labels", r"metadata\.labels\.helm\.sh/chart", MISSING, f"{CHART_NAME}-{version}"),
        ("the release, recorded by Helm on every object it owns", r"metadata\.annotations\.meta\.helm\.sh/release-name", MISSING, release),
        ("the release, recorded by Helm on every object it owns", r"metadata\.annotations\.meta\.helm\.sh/release-namespace", MISSING, namespace),
        (
            "part-of on every object (the overlays add it in deploy/base only, not to the components' or the namespace-scoped overlay's own objects)",
            r"metadata\.labels\.app\.kubernetes\.io/part-of",
            MISSING,
            "deletion-cost-operator",
        ),
        (
            "the scale-in webhook's cert-manager annotation only with certManager.enabled (the component always carries it; without cert-manager nothing reads it)",
            r"metadata\.annotations\.cert-manager\.io/inject-ca-from",
            f"{namespace}/deletion-cost-hook",
            MISSING,
        ),
        (
            "no namespace on the cluster-scoped FlowSchema and PriorityLevelConfiguration (kustomize sets one, not knowing their scope; the API server ignores it)",
            r"metadata\.namespace",
            namespace,
            MISSING,
        ),
        (
            "the binary's defaults written out as flags: " + " ".join(EXPLICIT_DEFAULT_FLAGS),
            r"spec\.template\.spec\.containers\[0\]\.args",
            "ARGS",
            "ARGS",
        ),
    ]


def compare(what: str, overlay: list[dict], chart: list[dict], release: str, namespace: str, version: str, seen: set[str]) -> list[str]:
    """The chart's objects against the overlay's, kind by kind, field by
    field; returns the unintended differences."""
    problems = []
    rules = intended(release, namespace, version)
    want = {key(o): o for o in overlay}
    got = {key(o): o for o in chart}
    # The overlays' Namespace (with its Pod Security labels): a release's
    # namespace exists before the release (helm --create-namespace makes it),
    # so the chart never owns it; the chart's README shows the labels.
    for k in [k for k in want if k[0] == "Namespace"]:
        del want[k]
        seen.add("the overlay's Namespace object")
    for k in sorted(set(want) - set(got)):
        problems.append(f"{what}: {k[0]} {k[1]}/{k[2]}: in the overlay, not in the chart")
    for k in sorted(set(got) - set(want)):
        problems.append(f"{what}: {k[0]} {k[1]}/{k[2]}: in the chart, not in the overlay")
    for k in sorted(set(want) & set(got)):
        a, b = copy.deepcopy(want[k]), copy.deepcopy(got[k])
        if k[0] == "Deployment":
            for obj in (a, b):
                obj["spec"]["template"]["spec"]["containers"][0].pop("args")
            args_a = want[k]["spec"]["template"]["spec"]["containers"][0]["args"]
            args_b = got[k]["spec"]["template"]["spec"]["containers"][0]["args"]
            extra = [x for x in args_b if x in EXPLICIT_DEFAULT_FLAGS]
            if sorted(extra) != sorted(EXPLICIT_DEFAULT_FLAGS):
                problems.append(f"{what}: Deployment args: expected every one of {EXPLICIT_DEFAULT_FLAGS}, got {extra}")
            rest = [x for x in args_b if x not in EXPLICIT_DEFAULT_FLAGS]
            if rest != args_a:
                problems.append(f"{what}: Deployment args differ (explicit defaults aside):\n    overlay: {args_a}\n    chart:   {rest}")
            else:
                seen.add(rules[-1][0])
        out: list[tuple[str, Any, Any]] = []
        diff("", a, b, out)
        for path, va, vb in out:
            rule = next((r for r in rules[:-1] if re.fullmatch(r[1], path) and r[2] == va and r[3] == vb), None)
            if rule and rule[1] == r"metadata\.namespace" and k[0] not in ("FlowSchema", "PriorityLevelConfiguration"):
                rule = None
            if rule:
                seen.add(rule[0] + " " + rule[1])
            else:
                problems.append(f"{what}: {k[0]} {k[1]}/{k[2]}: {path}: overlay {va!r}, chart {vb!r}")
    return problems


# ------------------------------------------------------------ README table


def schema_rows(schema: dict, defaults: Any, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key, type, default, description) of every value the schema names."""
    rows = []
    for name, prop in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        default = defaults.get(name) if isinstance(defaults, dict) else None
        if prop.get("type") == "object" and prop.get("additionalProperties") is False:
            rows.extend(schema_rows(prop, default, path + "."))
            continue
        shown = "(unset)" if default is None else f"`{json.dumps(default)}`"
        rows.append((path, type_text(prop), shown, prop.get("description", "")))
    return rows


def type_text(prop: dict) -> str:
    if "enum" in prop:
        return " \\| ".join(json.dumps(e) for e in prop["enum"])
    t = prop.get("type")
    if t is None and "oneOf" in prop:
        t = "/".join(p.get("type", "?") for p in prop["oneOf"])
    if t == "array":
        items = prop.get("items", {})
        inner = "object" if items.get("type") == "object" else items.get("type", "?")
        return f"array of {inner}"
    if t == "object":
        return "map of string"
    bounds = []
    if "minimum" in prop:
        bounds.append(f">= {prop['minimum']}")
    if "exclusiveMinimum" in prop:
        bounds.append(f"> {prop['exclusiveMinimum']}")
    if "maximum" in prop:
        bounds.append(f"<= {prop['maximum']}")
    return t + (f" ({', '.join(bounds)})" if bounds else "")


def readme_table() -> str:
    schema = json.loads((CHART / "values.schema.json").read_text())
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    for path, t, default, desc in schema_rows(schema, default_values()):
        cell = desc.replace("|", "\\|")
        lines.append(f"| `{path}` | {t} | {default} | {cell} |")
    return "\n".join(lines) + "\n"


TABLE_START = "<!-- values table: generated by `scripts/chart.sh readme-table --write` from values.schema.json and values.yaml -->\n"
TABLE_END = "<!-- end of values table -->"


def readme_section() -> tuple[str, str, str]:
    text = (CHART / "README.md").read_text()
    if TABLE_START not in text or TABLE_END not in text:
        die("charts/deletion-cost-operator/README.md has no values table markers")
    head, rest = text.split(TABLE_START, 1)
    table, tail = rest.split(TABLE_END, 1)
    return head, table, tail


# ------------------------------------------------------------------ tests


class Checks:
    def __init__(self) -> None:
        self.passed = 0
        self.failed: list[str] = []

    def check(self, name: str, problems: list[str]) -> None:
        if problems:
            self.failed.append(name)
            log(f"FAIL {name}")
            for p in problems:
                print(f"    {p}", file=sys.stderr)
        else:
            self.passed += 1
            log(f"ok   {name}")


def refused(values: dict, release: str = "deletion-cost", namespace: str = "deletion-cost-system") -> str:
    """Helm's error for an install with these values ('' when accepted)."""
    h = helm()
    try:
        template(release, namespace, values)
    except h.HelmError as e:
        return str(e)
    return ""


BAD_VALUES = [
    # (what, values, a part of Helm's refusal)
    ("a typo in a key", {"serviceMonitor": {"enabeld": True}}, "enabeld"),
    ("a typo at the top", {"replicas": 3}, "replicas"),
    ("a wrong type", {"replicaCount": "2"}, "replicaCount"),
    ("a value out of range", {"operator": {"qps": 0}}, "qps"),
    ("a value outside its enum", {"scope": "cluster-wide"}, "scope"),
    ("a malformed digest", {"image": {"digest": "latest"}}, "digest"),
    ("several replicas without leader election", {"leaderElection": {"enabled": False}}, "leaderElection.enabled=false needs replicaCount=1"),
    ("a renew deadline not below the lease duration", {"leaderElection": {"renewDeadline": 15}}, "renewDeadline"),
    ("a shutdown grace not below the termination grace", {"operator": {"shutdownGrace": 30}}, "shutdownGrace"),
    ("a PDB that blocks every drain", {"podDisruptionBudget": {"minAvailable": 2}}, "minAvailable"),
    ("cert-manager without the hook", {"certManager": {"enabled": True}, "hook": {"enabled": False}}, "needs hook.enabled=true"),
    ("the scale-in webhook without the hook", {"scaleWebhook": {"enabled": True}, "hook": {"enabled": False}}, "scaleWebhook.enabled=true needs hook.enabled=true"),
    ("a webhook timeout not above its budget", {"scaleWebhook": {"enabled": True, "timeoutSeconds": 2}}, "timeoutSeconds"),
    ("the webhook's NetworkPolicy without the API server's addresses", {"scaleWebhook": {"enabled": True}, "networkPolicy": {"enabled": True}}, "networkPolicy.apiServerCIDRs"),
    ("the webhook's port on the hook's", {"scaleWebhook": {"enabled": True, "port": 8443}}, "scaleWebhook.port"),
    ("client names without their CA", {"scaleWebhook": {"enabled": True, "clientCA": {"names": ["kube-apiserver"]}}}, "scaleWebhook.clientCA.configMap"),
    ("a malformed API server CIDR", {"networkPolicy": {"apiServerCIDRs": ["10.0.0.1"]}}, "apiServerCIDRs"),
    ("prices without the hook", {"prices": {"enabled": True}, "hook": {"enabled": False}}, "prices.enabled=true needs hook.enabled=true"),
    ("an empty prices file", {"prices": {"enabled": True, "file": ""}}, "file"),
]


def run_tests(args: argparse.Namespace) -> int:
    started = time.monotonic()
    checks = Checks()
    version = crate_version()
    h = helm()
    log(f"{h.get_version()} (Helm's Go library)")

    # 1. lint: the defaults, every switch on, both scopes
    def lint_problems(values: dict | None) -> list[str]:
        msgs = lint(values)
        return [f"severity {s} at {p}" for s, p in msgs if s >= 2]

    checks.check("lint: default values", lint_problems(None))
    checks.check("lint: every switch on (scope=cluster)", lint_problems(EVERY_SWITCH))
    checks.check("lint: every switch on (scope=namespace)", lint_problems(merge(EVERY_SWITCH, {"scope": "namespace"})))
    typo = lint({"serviceMonitor": {"enabeld": True}})
    checks.check(
        "lint: a values file with a typo is refused",
        [] if any(s == 3 and p == "values.yaml" for s, p in typo) else [f"lint passed it: {typo}"],
    )

    # 2. refusals at install
    problems = []
    for what, values, expect in BAD_VALUES:
        err = refused(values)
        if not err:
            problems.append(f"{what} ({values}): installed")
        elif expect not in err:
            problems.append(f"{what} ({values}): refused, but the message does not name {expect!r}: {err}")
    checks.check(f"install refuses bad values ({len(BAD_VALUES)} cases)", problems)

    # 3. the render against the overlays
    seen: set[str] = set()
    all_problems: list[str] = []
    scratch = REPO / "target" / "chart-test"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    crd_text = (REPO / "deploy" / "crd" / "crd.yaml").read_text()
    crd = yaml.safe_load(crd_text)
    # (what is added to the overlay, its components, the chart's values for them)
    cases = [
        ("", [], {}),
        (" + every component", COMPONENTS, ALL_ON),
        # the webhook without cert-manager: the operator fills its caBundle
        (" + scale-webhook", ["scale-webhook"], {"scaleWebhook": {"enabled": True}}),
    ]
    for overlay, scope, namespace in [("cluster-wide", "cluster", "deletion-cost-system"), ("namespace-scoped", "namespace", "my-app")]:
        for suffix, components, on in cases:
            with_components = bool(components)
            what = f"{overlay}{suffix}"
            values = merge({"scope": scope}, on)
            render = template("deletion-cost", namespace, values)
            problems = compare(what, overlay_objects(overlay, components, scratch), render.objects, "deletion-cost", namespace, version, seen)
            if [c for c in render.crds if c != crd]:
                problems.append(f"{what}: the CRD Helm installs from crds/ is not deploy/crd/crd.yaml")
            if not render.crds:
                problems.append(f"{what}: Helm installed no CRD from crds/")
            checks.check(f"render = kubectl kustomize deploy/overlays/{what}: {len(render.objects)} objects", problems)
            all_problems += problems
            if not with_components:
                notes_problems = [] if "DeletionCostPolicy" in render.notes and "port-forward" in render.notes else [f"NOTES: {render.notes!r}"]
                checks.check(f"NOTES.txt ({overlay}) names the next steps", notes_problems)
    shutil.rmtree(scratch, ignore_errors=True)
    rules = {r[0] + " " + r[1] for r in intended("", "", version)[:-1]} | {intended("", "", version)[-1][0], "the overlay's Namespace object"}
    unused = sorted(rules - seen)
    checks.check("every intended difference was seen (none is stale)", [f"never seen: {u}" for u in unused])
    if not all_problems:
        log("intended differences, each seen: " + "; ".join(sorted({r.split(' metadata')[0] for r in seen})))

    # 4. every other switch renders into objects Helm installs
    render = template("deletion-cost", "ops", EVERY_SWITCH)
    kinds = sorted({o["kind"] for o in render.objects})
    dep = next(o for o in render.objects if o["kind"] == "Deployment")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    problems = []
    for flag in [
        "--burst=100000",
        "--qps=7.5",
        "--renew-deadline=12.5",
        "--dry-run",
        "--hook-token-audience=other",
        "--metrics-addr=0.0.0.0:9090",
        "--scale-webhook-addr=0.0.0.0:9444",
        "--scale-webhook-client-ca=/etc/deletion-cost/webhook-clients/ca.crt",
        "--scale-webhook-client-name=apiserver.example",
        "--node-removal-window=600",
    ]:
        if flag not in args:
            problems.append(f"{flag} not in {args}")
    if dep["spec"]["template"]["spec"]["containers"][0]["image"] != "registry.example/deletion-cost-operator@sha256:" + "ab" * 32:
        problems.append(f"image {dep['spec']['template']['spec']['containers'][0]['image']}")
    if "Issuer" in kinds:
        problems.append("a self-signed Issuer beside certManager.issuerRef")
    # the alerting rules as Prometheus reads them: the plain rules file's
    # groups, their own {{ $labels }} templates left to Prometheus
    rules = next((o for o in render.objects if o["kind"] == "PrometheusRule"), None)
    plain = yaml.safe_load((REPO / "deploy" / "components" / "alerts" / "rules.yaml").read_text())
    if rules is None:
        problems.append("no PrometheusRule with prometheusRule.enabled")
    else:
        if rules["spec"] != plain:
            problems.append("the PrometheusRule's spec is not deploy/components/alerts/rules.yaml")
        if "{{ $labels.cache }}" not in json.dumps(rules["spec"]):
            problems.append("the alerts' {{ $labels }} templates did not reach the PrometheusRule as written")
        if rules["metadata"]["labels"].get("release") != "prometheus":
            problems.append(f"prometheusRule.labels not on the PrometheusRule: {rules['metadata']['labels']}")
    checks.check(f"every switch: {len(render.objects)} objects ({', '.join(kinds)})", problems)

    # 5. the package
    with tempfile.TemporaryDirectory(prefix="chart-package-") as tmp:
        path = package(Path(tmp))
        problems = []
        if Path(path).name != f"{CHART_NAME}-{version}.tgz":
            problems.append(f"{Path(path).name}: not {CHART_NAME}-{version}.tgz (the crate's version)")
        with tarfile.open(path) as tar:
            names = set(tar.getnames())
            meta = yaml.safe_load(tar.extractfile(f"{CHART_NAME}/Chart.yaml").read())
            packaged_crd = tar.extractfile(f"{CHART_NAME}/crds/crd.yaml").read().decode()
        for needed in ["values.schema.json", "README.md", "templates/NOTES.txt", "crds/crd.yaml", "files/alert-rules.yaml"]:
            if f"{CHART_NAME}/{needed}" not in names:
                problems.append(f"{needed} not in the package")
        if meta.get("version") != version or meta.get("appVersion") != version:
            problems.append(f"packaged Chart.yaml: version {meta.get('version')}, appVersion {meta.get('appVersion')}; the crate is {version}")
        if packaged_crd != crd_text:
            problems.append("the packaged CRD is not deploy/crd/crd.yaml")
        packaged = template("deletion-cost", "deletion-cost-system", {}, chart=path)
        if len(packaged.objects) != len(template("deletion-cost", "deletion-cost-system", {}).objects):
            problems.append("the package installs other objects than the chart directory")
        checks.check(f"package: {Path(path).name} ({len(names)} files) installs as the directory does", problems)

    # 6. the README's values table
    _, table, _ = readme_section()
    checks.check(
        "the chart README's values table is the schema's (scripts/chart.sh readme-table --write)",
        [] if table == readme_table() else ["it differs: regenerate it"],
    )

    took = time.monotonic() - started
    print(f"chart: {checks.passed} passed, {len(checks.failed)} failed ({took:.1f} s)", file=sys.stderr)
    print(f"{checks.passed} passed, {len(checks.failed)} failed")
    return 1 if checks.failed else 0


# ---------------------------------------------------------------- package


def package(dest: Path) -> str:
    """helm package: the chart as DEST/deletion-cost-operator-VERSION.tgz,
    VERSION being Chart.yaml's (the crate's)."""
    h = helm()
    dest.mkdir(parents=True, exist_ok=True)
    config = h.Configuration(namespace="default")
    return asyncio.run(h.Package(config).run(str(CHART), str(dest)))


# ---------------------------------------------------------- release actions


def kubeconfig() -> str:
    path = os.environ.get("KUBECONFIG", "")
    if not path:
        die("KUBECONFIG is not set: it names the cluster to install into")
    return path


def print_release(result: dict, as_json: bool) -> None:
    info = result.get("info", {})
    if as_json:
        print(
            json.dumps(
                {
                    "name": result.get("name"),
                    "namespace": result.get("namespace"),
                    "revision": result.get("version"),
                    "status": info.get("status"),
                    "notes": info.get("notes", ""),
                    "manifest": result.get("manifest", ""),
                }
            )
        )
        return
    print(f"NAME: {result.get('name')}")
    print(f"NAMESPACE: {result.get('namespace')}")
    print(f"STATUS: {info.get('status')}")
    print(f"REVISION: {result.get('version')}")
    if info.get("notes"):
        print("NOTES:")
        print(info["notes"])


def crd_conflict_hint(error: str, args: argparse.Namespace) -> str:
    """What to do when Helm's server-side apply of the CRD conflicts with
    another field manager ('' for any other error)."""
    m = re.search(r'failed to install CRD .*conflicts? with "([^"]+)"', error)
    if not m:
        return ""
    manager = m.group(1)
    earlier = " (an earlier `kubectl apply`, client-side)" if manager == "kubectl-client-side-apply" else ""
    return (
        f"\nThe DeletionCostPolicy CRD is already in the cluster, set by the field manager {manager!r}{earlier}, "
        "with other values than this chart's (another version of the operator). Helm 4 applies the chart's CRD "
        "server-side at install and does not take over fields another manager set unless told to. To install the "
        "chart's CRD over it (policies are kept), run the same command with --force-conflicts:\n"
        f"    scripts/chart.sh install {args.release} -n {args.namespace} ... --force-conflicts\n"
        f"    helm install {args.release} charts/deletion-cost-operator -n {args.namespace} ... --force-conflicts   (Helm 4)"
    )


def release_action(args: argparse.Namespace) -> int:
    h = helm()
    config = h.Configuration(namespace=args.namespace, kubeconfig=kubeconfig())
    try:
        if args.command == "uninstall":
            result = asyncio.run(h.Uninstall(config).run(args.release, wait=args.wait, timeout=args.timeout))
            print(json.dumps(result) if args.json else f'release "{args.release}" uninstalled')
            return 0
        values = user_values(args.values, args.set)
        common = dict(
            values=values or None,
            wait=args.wait,
            timeout=args.timeout,
            disable_openapi_validation=False,
            force_conflicts=args.force_conflicts,
        )
        if args.command == "install":
            result = asyncio.run(
                h.Install(config).run(args.release, args.chart, create_namespace=args.create_namespace, server_side_apply=True, **common)
            )
        else:
            result = asyncio.run(h.Upgrade(config).run(args.release, args.chart, server_side_apply="auto", install=args.install, **common))
    except h.HelmError as e:
        print(f"Error: {e}{crd_conflict_hint(str(e), args)}", file=sys.stderr)
        return 1
    print_release(result, args.json)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("test")
    p = sub.add_parser("template")
    p.add_argument("release")
    p.add_argument("-n", "--namespace", default="default")
    p.add_argument("-f", "--values", action="append", default=[])
    p.add_argument("--set", action="append", default=[])
    p = sub.add_parser("lint")
    p.add_argument("-f", "--values", action="append", default=[])
    p.add_argument("--set", action="append", default=[])
    p = sub.add_parser("package")
    p.add_argument("destination", nargs="?", default=str(REPO / "target" / "chart"))
    p = sub.add_parser("readme-table")
    p.add_argument("--write", action="store_true")
    for name in ("install", "upgrade", "uninstall"):
        p = sub.add_parser(name)
        p.add_argument("release")
        p.add_argument("-n", "--namespace", default="default")
        p.add_argument("--wait", action="store_true", help="wait until every object is ready")
        p.add_argument("--timeout", type=int, default=300)
        p.add_argument("--json", action="store_true", help="print the release as JSON (manifest included)")
        if name != "uninstall":
            p.add_argument("--chart", default=str(CHART), help="chart directory or .tgz (default: this checkout's)")
            p.add_argument("-f", "--values", action="append", default=[])
            p.add_argument("--set", action="append", default=[])
            p.add_argument(
                "--force-conflicts",
                action="store_true",
                help="server-side apply takes over fields another field manager set (as Helm 4's flag): "
                "installs the chart's CRD over one an earlier `kubectl apply` left",
            )
        if name == "install":
            p.add_argument("--create-namespace", action="store_true")
        if name == "upgrade":
            p.add_argument("-i", "--install", action="store_true")
    args = parser.parse_args()

    # The stand-in keeps no Secrets: Helm keeps those releases in memory.
    # The library's Go runtime reads the environment the process started
    # with, so the process starts again with HELM_DRIVER set.
    if args.command in ("test", "template", "lint", "package", "readme-table") and os.environ.get("HELM_DRIVER") != "memory":
        env = dict(os.environ, HELM_DRIVER="memory")
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    # Helm names the field manager of its server-side applies after the
    # program (its CLI: "helm"); the process starts again under that name,
    # so the helm CLI and this script can take turns on one release.
    if args.command in ("install", "upgrade", "uninstall") and Path(sys.orig_argv[0]).name != "helm":
        os.execv(sys.executable, ["helm", *sys.orig_argv[1:]])
    if args.command == "test":
        return run_tests(args)
    if args.command == "template":
        try:
            render = template(args.release, args.namespace, user_values(args.values, args.set))
        except helm().HelmError as e:
            print(f"Error: {e}", file=sys.stderr)
            return 1
        sys.stdout.write(render.manifest)
        return 0
    if args.command == "lint":
        values = user_values(args.values, args.set)
        msgs = lint(values)
        names = {1: "INFO", 2: "WARNING", 3: "ERROR"}
        for s, p in msgs:
            print(f"[{names.get(s, s)}] {p}")
        bad = any(s >= 3 for s, _ in msgs)
        if bad:
            # the library's lint keeps no message text; an install says why
            try:
                template("lint", "default", values)
            except helm().HelmError as e:
                print(f"  {e}")
        print(f"1 chart(s) linted, {1 if bad else 0} chart(s) failed")
        return 1 if bad else 0
    if args.command == "package":
        print(package(Path(args.destination).resolve()))
        return 0
    if args.command == "readme-table":
        if args.write:
            head, _, tail = readme_section()
            (CHART / "README.md").write_text(head + TABLE_START + readme_table() + TABLE_END + tail)
        else:
            sys.stdout.write(readme_table())
        return 0
    return release_action(args)


if __name__ == "__main__":
    sys.exit(main())
