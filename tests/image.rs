//! Checks the runtime image that `scripts/build-image.sh` built, from its
//! docker-archive (`--output-archive`): the image config (user 65532, the
//! binary as entrypoint, labels and tag), a root filesystem that holds only
//! the binary, its SBOM and the CA bundle, a statically linked binary that
//! carries its dependency list (`cargo auditable`'s `.dep-v0` section), an
//! SBOM that lists the crates of Cargo.lock the binary is built from (in the
//! image and beside the archive), and `deletion-cost --version` run inside
//! that root filesystem (in a chroot as uid 65532 when the test runs as
//! root), and with `podman run` where containers can run.
//!
//! `scripts/test.sh` builds the image first and sets
//! `DELETION_COST_IMAGE_ARCHIVE` to the archive. Without it every check is
//! reported as ignored, never as passed. By hand:
//!
//! ```sh
//! scripts/build-image.sh --output-archive target/image/image.tar
//! DELETION_COST_IMAGE_ARCHIVE=target/image/image.tar cargo test --test image
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output};
use std::sync::{Arc, OnceLock};

use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;

const ARCHIVE_ENV: &str = "DELETION_COST_IMAGE_ARCHIVE";
const NAME: &str = env!("CARGO_PKG_NAME");
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The only files in the image besides directories.
const BINARY: &str = "deletion-cost";
const SBOM: &str = "deletion-cost.cdx.json";
const CA_BUNDLE: &str = "etc/ssl/certs/ca-certificates.crt";
/// The section `cargo auditable` writes the dependency list to.
const DEP_SECTION: &str = ".dep-v0";
const USER: &str = "65532:65532";

type Check = fn(&Image) -> Result<(), String>;

const CHECKS: [(&str, Check); 7] = [
    (
        "config_runs_the_binary_as_uid_65532",
        config_runs_the_binary,
    ),
    ("tag_and_labels_carry_the_cargo_version", tag_and_labels),
    (
        "root_filesystem_is_the_binary_its_sbom_and_the_ca_bundle",
        root_filesystem,
    ),
    ("binary_is_statically_linked", binary_is_static),
    (
        "binary_carries_its_dependency_list",
        binary_carries_its_dependency_list,
    ),
    ("sbom_lists_the_crates_of_cargo_lock", sbom_lists_the_crates),
    ("version_runs_from_the_image_root_filesystem", version_runs),
];

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let archive = std::env::var_os(ARCHIVE_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    if archive.is_none() {
        eprintln!(
            "image: {ARCHIVE_ENV} is not set: every check is ignored \
             (scripts/test.sh builds the image and sets it)"
        );
    }
    let image: Arc<OnceLock<Result<Image, String>>> = Arc::new(OnceLock::new());
    let mut trials: Vec<Trial> = CHECKS
        .iter()
        .map(|&(name, check)| {
            let (image, path) = (image.clone(), archive.clone());
            Trial::test(name, move || {
                let archive = path.expect("ignored without an archive");
                match image.get_or_init(|| Image::load(&archive)) {
                    Ok(image) => check(image).map_err(Failed::from),
                    Err(e) => Err(Failed::from(format!("cannot read the image: {e}"))),
                }
            })
            .with_ignored_flag(archive.is_none())
        })
        .collect();

    // `podman run`, only where containers can run: elsewhere (no podman, not
    // root, or a sandbox without setrlimit) the root filesystem check above
    // stands in for it.
    let podman = archive.as_deref().map(podman_run_version);
    if let Some(Err(why)) = &podman {
        eprintln!("image: podman_run_prints_the_version is ignored: {why}");
    }
    let runs = matches!(podman, Some(Ok(_)));
    trials.push(
        Trial::test("podman_run_prints_the_version", move || match podman {
            Some(Ok(out)) => expect_version(&out).map_err(Failed::from),
            _ => Err(Failed::from("ignored")),
        })
        .with_ignored_flag(!runs),
    );
    libtest_mimic::run(&args, trials).exit_code()
}

// ---------------------------------------------------------------------------
// The checks

fn config_runs_the_binary(image: &Image) -> Result<(), String> {
    let config = &image.config["config"];
    check_eq(&config["User"], &Value::from(USER), "config.User")?;
    check_eq(
        &config["Entrypoint"],
        &serde_json::json!([format!("/{BINARY}")]),
        "config.Entrypoint",
    )?;
    check_eq(&config["Cmd"], &serde_json::json!(["run"]), "config.Cmd")?;
    check_eq(&image.config["os"], &Value::from("linux"), "os")?;
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    check_eq(
        &image.config["architecture"],
        &Value::from(arch),
        "architecture",
    )
}

fn tag_and_labels(image: &Image) -> Result<(), String> {
    // docker.io/library/NAME is what a cluster's runtime calls plain NAME,
    // the name the Deployment uses
    check_eq(
        &image.manifest["RepoTags"],
        &serde_json::json!([format!("docker.io/library/{NAME}:{VERSION}")]),
        "RepoTags",
    )?;
    let labels = &image.config["config"]["Labels"];
    check_eq(
        &labels["org.opencontainers.image.title"],
        &Value::from(NAME),
        "title label",
    )?;
    check_eq(
        &labels["org.opencontainers.image.version"],
        &Value::from(VERSION),
        "version label",
    )
}

fn root_filesystem(image: &Image) -> Result<(), String> {
    let files: Vec<&str> = image
        .files
        .iter()
        .filter(|(_, e)| e.kind != b'5')
        .map(|(p, _)| p.as_str())
        .collect();
    if files != [BINARY, SBOM, CA_BUNDLE] {
        return Err(format!(
            "the image holds {files:?}; expected only [{BINARY:?}, {SBOM:?}, {CA_BUNDLE:?}] \
             (no shell, no libc, nothing else)"
        ));
    }
    let sbom = &image.files[SBOM];
    if sbom.mode & 0o7777 != 0o644 || sbom.uid != 0 {
        return Err(format!(
            "/{SBOM}: mode {:o}, uid {}; expected 0644, owned by root",
            sbom.mode, sbom.uid
        ));
    }
    let bin = &image.files[BINARY];
    if (bin.kind != b'0' && bin.kind != 0) || bin.mode & 0o7777 != 0o755 || bin.uid != 0 {
        return Err(format!(
            "/{BINARY}: type {:?}, mode {:o}, uid {}; expected a regular file, 0755, owned by root \
             (uid 65532 must not be able to change it)",
            bin.kind as char, bin.mode, bin.uid
        ));
    }
    let ca = &image.files[CA_BUNDLE];
    let certs = String::from_utf8_lossy(&ca.data)
        .matches("-----BEGIN CERTIFICATE-----")
        .count();
    if certs < 50 || ca.mode & 0o004 == 0 {
        return Err(format!(
            "/{CA_BUNDLE}: {certs} certificates, mode {:o}; expected a world-readable public CA bundle",
            ca.mode
        ));
    }
    Ok(())
}

fn binary_is_static(image: &Image) -> Result<(), String> {
    let elf = elf_linking(&image.files[BINARY].data)?;
    if let Some(interp) = elf.interpreter {
        return Err(format!(
            "/{BINARY} is dynamically linked: interpreter {interp}"
        ));
    }
    if elf.needed > 0 {
        return Err(format!(
            "/{BINARY} needs {} shared libraries (DT_NEEDED)",
            elf.needed
        ));
    }
    Ok(())
}

/// One crate of the binary's dependency list (`cargo auditable`'s format).
#[derive(Debug, Clone, serde::Deserialize)]
struct AuditedPackage {
    name: String,
    version: String,
    source: String,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    root: bool,
}

/// The dependency list the binary carries: its `.dep-v0` section,
/// zlib-compressed JSON.
fn dependency_list(bin: &[u8]) -> Result<Vec<AuditedPackage>, String> {
    let compressed = elf_section(bin, DEP_SECTION)?.ok_or_else(|| {
        format!("/{BINARY} has no {DEP_SECTION} section: not built with `cargo auditable build`")
    })?;
    let json = miniz_oxide::inflate::decompress_to_vec_zlib(compressed)
        .map_err(|e| format!("{DEP_SECTION} is not zlib data: {e:?}"))?;
    #[derive(serde::Deserialize)]
    struct VersionInfo {
        packages: Vec<AuditedPackage>,
    }
    let info: VersionInfo =
        serde_json::from_slice(&json).map_err(|e| format!("{DEP_SECTION} is not its JSON: {e}"))?;
    Ok(info.packages)
}

fn binary_carries_its_dependency_list(image: &Image) -> Result<(), String> {
    let packages = dependency_list(&image.files[BINARY].data)?;
    let roots: Vec<_> = packages.iter().filter(|p| p.root).collect();
    if roots.len() != 1 || roots[0].name != NAME || roots[0].version != VERSION {
        return Err(format!(
            "{DEP_SECTION}: roots {roots:?}; expected {NAME} {VERSION}"
        ));
    }
    let names: Vec<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    for needed in [
        "deletion-cost-core",
        "deletion-cost-runtime",
        "kube-client",
        "tokio",
        "rustls",
    ] {
        if !names.contains(&needed) {
            return Err(format!("{DEP_SECTION} does not list {needed}: {names:?}"));
        }
    }
    // the product's crates only: nothing of the test kit or the tests' own
    for test_only in [
        "deletion-cost-testkit",
        "proptest",
        "criterion",
        "miniz_oxide",
    ] {
        if names.contains(&test_only) {
            return Err(format!(
                "{DEP_SECTION} lists {test_only}, which only the tests use"
            ));
        }
    }
    // from the default registry or the workspace, nothing else
    if let Some(p) = packages
        .iter()
        .find(|p| p.source != "crates.io" && p.source != "local")
    {
        return Err(format!("{DEP_SECTION}: {p:?} comes from elsewhere"));
    }
    // proc-macros are build-time only, the runtime's crates are not
    let kind = |name: &str| {
        packages
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.kind.as_deref().unwrap_or("runtime"))
    };
    if kind("serde_derive") != Some("build") || kind("tokio") != Some("runtime") {
        return Err(format!(
            "{DEP_SECTION}: serde_derive is {:?}, tokio {:?}; expected build, runtime",
            kind("serde_derive"),
            kind("tokio")
        ));
    }
    Ok(())
}

/// Cargo.lock's packages: (name, version) -> checksum (empty for the
/// workspace's own crates).
fn cargo_lock() -> Result<BTreeMap<(String, String), String>, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = BTreeMap::new();
    for block in text.split("[[package]]").skip(1) {
        let field = |key: &str| {
            block.lines().find_map(|l| {
                l.strip_prefix(key)
                    .and_then(|v| v.trim().strip_prefix('='))
                    .map(|v| v.trim().trim_matches('"').to_string())
            })
        };
        let (Some(name), Some(version)) = (field("name "), field("version ")) else {
            return Err(format!(
                "Cargo.lock: a package without name or version: {block}"
            ));
        };
        out.insert((name, version), field("checksum ").unwrap_or_default());
    }
    Ok(out)
}

/// What `cargo tree` says the release binary is built from: its normal and
/// build dependencies on this platform, as the image's build resolves them.
fn cargo_tree() -> Result<BTreeSet<(String, String)>, String> {
    let out = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "tree",
            "--locked",
            "--offline",
            "--prefix",
            "none",
            "--no-dedupe",
        ])
        .args(["-e", "normal,build", "-p", NAME, "--target"])
        .arg(host_target()?)
        .output()
        .map_err(|e| format!("cargo tree: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo tree: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let name = words.next()?;
            let version = words.next()?.strip_prefix('v')?;
            Some((name.to_string(), version.to_string()))
        })
        .collect())
}

fn host_target() -> Result<String, String> {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .map_err(|e| format!("rustc -vV: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .ok_or_else(|| "rustc -vV names no host".to_string())
}

fn sbom_lists_the_crates(image: &Image) -> Result<(), String> {
    let sbom: Value = serde_json::from_slice(&image.files[SBOM].data)
        .map_err(|e| format!("/{SBOM} is not JSON: {e}"))?;
    check_eq(&sbom["bomFormat"], &Value::from("CycloneDX"), "bomFormat")?;
    check_eq(&sbom["specVersion"], &Value::from("1.5"), "specVersion")?;
    let root = &sbom["metadata"]["component"];
    check_eq(&root["name"], &Value::from(NAME), "metadata.component.name")?;
    check_eq(
        &root["version"],
        &Value::from(VERSION),
        "metadata.component.version",
    )?;

    let lock = cargo_lock()?;
    let mut listed = BTreeSet::new();
    for c in sbom["components"].as_array().ok_or("no components")? {
        let field = |k: &str| c[k].as_str().unwrap_or_default().to_string();
        let (name, version) = (field("name"), field("version"));
        let key = (name.clone(), version.clone());
        // every crate listed is one of Cargo.lock, with the lock's checksum
        let Some(checksum) = lock.get(&key) else {
            return Err(format!(
                "/{SBOM} lists {name} {version}, which Cargo.lock does not have"
            ));
        };
        if !checksum.is_empty() {
            check_eq(
                &c["hashes"][0]["content"],
                &Value::from(checksum.as_str()),
                &format!("{name} {version}'s SHA-256"),
            )?;
            check_eq(
                &c["purl"],
                &Value::from(format!("pkg:cargo/{name}@{version}")),
                &format!("{name} {version}'s purl"),
            )?;
            if c["licenses"][0]["expression"]
                .as_str()
                .unwrap_or_default()
                .is_empty()
            {
                return Err(format!("/{SBOM}: {name} {version} without its licence"));
            }
        }
        listed.insert(key);
    }
    // exactly what the binary carries
    let carried: BTreeSet<(String, String)> = dependency_list(&image.files[BINARY].data)?
        .into_iter()
        .filter(|p| !p.root)
        .map(|p| (p.name, p.version))
        .collect();
    if listed != carried {
        return Err(format!(
            "/{SBOM} and {DEP_SECTION} differ: only in the SBOM {:?}, only in the binary {:?}",
            listed.difference(&carried).collect::<Vec<_>>(),
            carried.difference(&listed).collect::<Vec<_>>()
        ));
    }
    // and every crate of Cargo.lock cargo builds the binary from
    let mut built = cargo_tree()?;
    built.remove(&(NAME.to_string(), VERSION.to_string()));
    let missing: Vec<_> = built.difference(&listed).collect();
    if built.len() < 100 || !missing.is_empty() {
        return Err(format!(
            "cargo tree names {} crates for the binary; /{SBOM} misses {missing:?}",
            built.len()
        ));
    }
    // the copy beside the archive is the image's
    let beside = image.archive.with_extension("cdx.json");
    let copy = std::fs::read(&beside).map_err(|e| format!("{}: {e}", beside.display()))?;
    if copy != image.files[SBOM].data {
        return Err(format!("{} is not the image's /{SBOM}", beside.display()));
    }
    eprintln!(
        "image: /{SBOM}: {} crates, each in Cargo.lock; {} of them in the binary's build per cargo tree",
        listed.len(),
        built.len()
    );
    Ok(())
}

fn version_runs(image: &Image) -> Result<(), String> {
    let entrypoint: Vec<String> =
        serde_json::from_value(image.config["config"]["Entrypoint"].clone())
            .map_err(|e| format!("config.Entrypoint: {e}"))?;
    let env: Vec<(String, String)> = image.config["config"]["Env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str()?.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let root = image.root.path();
    let mut cmd = if is_root() {
        // the image's root filesystem is all the process sees, as the image's user
        let mut cmd = Command::new(find_chroot()?);
        cmd.arg(format!("--userspec={USER}"))
            .arg(root)
            .args(&entrypoint);
        cmd
    } else {
        // not root: no chroot, but the binary still finds nothing outside its
        // own file (it is static and reads no files for --version)
        let bin = root.join(entrypoint[0].trim_start_matches('/'));
        let mut cmd = Command::new(bin);
        cmd.args(&entrypoint[1..]);
        cmd
    };
    let out = cmd
        .arg("--version")
        .env_clear()
        .envs(env)
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    expect_version(&out)?;
    eprintln!(
        "image: {} --version in the image's root filesystem ({}): {}",
        entrypoint.join(" "),
        if is_root() {
            "chroot, uid 65532"
        } else {
            "not root: no chroot"
        },
        String::from_utf8_lossy(&out.stdout).trim()
    );
    Ok(())
}

fn expect_version(out: &Output) -> Result<(), String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let want = format!("deletion-cost {VERSION}");
    if !out.status.success() || stdout.trim() != want {
        return Err(format!(
            "--version: {}, stdout {:?}, stderr {:?}; expected {want:?}",
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// Loads the archive into a throwaway podman store and runs `--version`;
/// `Err` says why containers cannot run here.
fn podman_run_version(archive: &Path) -> Result<Output, String> {
    if !is_root() {
        return Err("not root (a rootless podman store would outlive the test)".into());
    }
    let store = tempfile::tempdir().map_err(|e| e.to_string())?;
    let podman = |args: &[&str]| -> Result<Output, String> {
        Command::new("podman")
            .arg("--root")
            .arg(store.path().join("storage"))
            .arg("--runroot")
            .arg(store.path().join("run"))
            .args(["--storage-driver", "vfs"])
            .args(args)
            .output()
            .map_err(|e| format!("no podman: {e}"))
    };
    let archive = archive.to_str().ok_or("archive path is not UTF-8")?;
    let load = podman(&["load", "-q", "-i", archive])?;
    if !load.status.success() {
        return Err(format!(
            "podman load failed: {}",
            String::from_utf8_lossy(&load.stderr).trim()
        ));
    }
    let image = format!("docker.io/library/{NAME}:{VERSION}");
    let out = podman(&[
        "run",
        "--rm",
        "--pull=never",
        "--network=none",
        &image,
        "--version",
    ])?;
    if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("OCI") {
        return Err(format!(
            "containers cannot run on this machine: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out)
}

fn check_eq(got: &Value, want: &Value, what: &str) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what} is {got}, expected {want}"))
    }
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn find_chroot() -> Result<&'static str, String> {
    ["/usr/sbin/chroot", "/usr/bin/chroot", "/sbin/chroot"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .ok_or_else(|| "running as root but no chroot (coreutils) found".to_string())
}

// ---------------------------------------------------------------------------
// The image, read from a docker-archive

struct Image {
    /// The docker-archive it was read from.
    archive: PathBuf,
    /// The archive's manifest.json entry for the image.
    manifest: Value,
    /// The image config (config.User, config.Entrypoint, ...).
    config: Value,
    /// Every entry of every layer, by path relative to `/`, last layer wins.
    files: BTreeMap<String, Entry>,
    /// The layers unpacked: the image's root filesystem.
    root: tempfile::TempDir,
}

impl Image {
    fn load(archive: &Path) -> Result<Image, String> {
        let bytes = std::fs::read(archive).map_err(|e| format!("{}: {e}", archive.display()))?;
        let outer: BTreeMap<String, Entry> = read_tar(&bytes)?
            .into_iter()
            .map(|e| (e.path.clone(), e))
            .collect();
        let member = |name: &str| -> Result<&[u8], String> {
            outer
                .get(name)
                .map(|e| e.data.as_slice())
                .ok_or_else(|| format!("{name} is not in the archive (not a docker-archive?)"))
        };
        let manifests: Vec<Value> = serde_json::from_slice(member("manifest.json")?)
            .map_err(|e| format!("manifest.json: {e}"))?;
        let [manifest] = <[Value; 1]>::try_from(manifests)
            .map_err(|m| format!("the archive holds {} images, expected 1", m.len()))?;
        let config_name = manifest["Config"]
            .as_str()
            .ok_or("manifest without Config")?;
        let config: Value = serde_json::from_slice(member(config_name)?)
            .map_err(|e| format!("{config_name}: {e}"))?;
        let mut files = BTreeMap::new();
        for layer in manifest["Layers"]
            .as_array()
            .ok_or("manifest without Layers")?
        {
            let layer = layer.as_str().ok_or("layer name is not a string")?;
            for entry in read_tar(member(layer)?)? {
                if entry
                    .path
                    .rsplit('/')
                    .next()
                    .unwrap_or("")
                    .starts_with(".wh.")
                {
                    return Err(format!("whiteout {} in a FROM scratch image", entry.path));
                }
                files.insert(entry.path.clone(), entry);
            }
        }
        let root = tempfile::tempdir().map_err(|e| e.to_string())?;
        unpack(&files, root.path())?;
        Ok(Image {
            archive: archive.to_path_buf(),
            manifest,
            config,
            files,
            root,
        })
    }
}

fn unpack(files: &BTreeMap<String, Entry>, root: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    for (path, entry) in files {
        if path.split('/').any(|c| c == ".." || c.is_empty()) {
            return Err(format!("unsafe path {path:?} in a layer"));
        }
        let dest = root.join(path);
        let io = |e: std::io::Error| format!("unpacking {path}: {e}");
        match entry.kind {
            b'5' => std::fs::create_dir_all(&dest).map_err(io)?,
            b'0' | 0 => {
                if let Some(parent) = dest.parent() {
                    std::fs::create_dir_all(parent).map_err(io)?;
                }
                std::fs::write(&dest, &entry.data).map_err(io)?;
                std::fs::set_permissions(
                    &dest,
                    std::fs::Permissions::from_mode(entry.mode & 0o777),
                )
                .map_err(io)?;
            }
            other => {
                return Err(format!(
                    "{path}: unexpected tar entry type {:?}",
                    other as char
                ))
            }
        }
    }
    // the chroot's user must be able to reach the binary
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())
}

struct Entry {
    /// Relative to the archive's root, no leading `./` or `/`, no trailing `/`.
    path: String,
    /// The tar type flag: b'0' (or 0) file, b'5' directory, b'2' symlink, ...
    kind: u8,
    mode: u32,
    uid: u64,
    data: Vec<u8>,
}

/// A minimal reader for the uncompressed ustar/pax archives podman writes.
fn read_tar(bytes: &[u8]) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    let mut pos = 0;
    let mut long_path: Option<String> = None;
    while pos + 512 <= bytes.len() {
        let header = &bytes[pos..pos + 512];
        if header.iter().all(|&b| b == 0) {
            break;
        }
        let size = usize::try_from(tar_number(&header[124..136])?).map_err(|e| e.to_string())?;
        let data = bytes
            .get(pos + 512..pos + 512 + size)
            .ok_or("truncated tar entry")?;
        pos += 512 + size.div_ceil(512) * 512;
        let kind = header[156];
        match kind {
            // pax extended header: only a long path matters here
            b'x' => {
                long_path = String::from_utf8_lossy(data)
                    .lines()
                    .rev()
                    .find_map(|rec| Some(rec.split_once(' ')?.1.strip_prefix("path=")?.to_string()))
                    .or(long_path);
                continue;
            }
            b'L' => {
                long_path = Some(c_string(data));
                continue;
            }
            b'g' => continue,
            _ => {}
        }
        let name = c_string(&header[0..100]);
        let prefix = if &header[257..262] == b"ustar" {
            c_string(&header[345..500])
        } else {
            String::new()
        };
        let path = long_path.take().unwrap_or_else(|| {
            if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            }
        });
        let path = path
            .trim_start_matches("./")
            .trim_start_matches('/')
            .trim_end_matches('/')
            .to_string();
        if path.is_empty() || path == "." {
            continue;
        }
        out.push(Entry {
            path,
            kind,
            mode: u32::try_from(tar_number(&header[100..108])?).map_err(|e| e.to_string())?,
            uid: tar_number(&header[108..116])?,
            data: data.to_vec(),
        });
    }
    Ok(out)
}

fn c_string(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// Octal, or base-256 when the first byte's high bit is set (GNU).
fn tar_number(field: &[u8]) -> Result<u64, String> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        return Ok(field[1..]
            .iter()
            .fold(u64::from(field[0] & 0x7f), |n, &b| (n << 8) | u64::from(b)));
    }
    let text = c_string(field);
    let text = text.trim();
    if text.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(text, 8).map_err(|e| format!("tar number {text:?}: {e}"))
}

// ---------------------------------------------------------------------------
// ELF: is the binary static?

struct Linking {
    /// PT_INTERP: the dynamic loader a dynamic executable names.
    interpreter: Option<String>,
    /// DT_NEEDED entries: shared libraries it loads.
    needed: usize,
}

fn elf_linking(bin: &[u8]) -> Result<Linking, String> {
    let u16_at = |o: usize| -> Result<u16, String> {
        Ok(u16::from_le_bytes(
            bin.get(o..o + 2)
                .ok_or("truncated ELF")?
                .try_into()
                .unwrap(),
        ))
    };
    let u32_at = |o: usize| -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            bin.get(o..o + 4)
                .ok_or("truncated ELF")?
                .try_into()
                .unwrap(),
        ))
    };
    let u64_at = |o: usize| -> Result<usize, String> {
        let v = u64::from_le_bytes(
            bin.get(o..o + 8)
                .ok_or("truncated ELF")?
                .try_into()
                .unwrap(),
        );
        usize::try_from(v).map_err(|e| e.to_string())
    };
    if bin.get(0..4) != Some(b"\x7fELF".as_slice()) || bin[4] != 2 || bin[5] != 1 {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let (phoff, phentsize, phnum) = (u64_at(0x20)?, usize::from(u16_at(0x36)?), u16_at(0x38)?);
    let mut linking = Linking {
        interpreter: None,
        needed: 0,
    };
    for i in 0..usize::from(phnum) {
        let ph = phoff + i * phentsize;
        let (offset, size) = (u64_at(ph + 8)?, u64_at(ph + 32)?);
        let segment = bin
            .get(offset..offset + size)
            .ok_or("program header points outside the file")?;
        match u32_at(ph)? {
            3 => linking.interpreter = Some(c_string(segment)),
            2 => {
                linking.needed += segment
                    .chunks_exact(16)
                    .map(|d| i64::from_le_bytes(d[..8].try_into().unwrap()))
                    .take_while(|&tag| tag != 0)
                    .filter(|&tag| tag == 1)
                    .count();
            }
            _ => {}
        }
    }
    Ok(linking)
}

/// The contents of the ELF section `name`, if the file has one.
fn elf_section<'a>(bin: &'a [u8], name: &str) -> Result<Option<&'a [u8]>, String> {
    let bytes = |o: usize, n: usize| bin.get(o..o + n).ok_or("truncated ELF");
    let u16_at = |o: usize| -> Result<usize, String> {
        Ok(usize::from(u16::from_le_bytes(
            bytes(o, 2)?.try_into().unwrap(),
        )))
    };
    let u32_at = |o: usize| -> Result<usize, String> {
        usize::try_from(u32::from_le_bytes(bytes(o, 4)?.try_into().unwrap()))
            .map_err(|e| e.to_string())
    };
    let u64_at = |o: usize| -> Result<usize, String> {
        usize::try_from(u64::from_le_bytes(bytes(o, 8)?.try_into().unwrap()))
            .map_err(|e| e.to_string())
    };
    if bin.get(0..4) != Some(b"\x7fELF".as_slice()) || bin[4] != 2 || bin[5] != 1 {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28)?, u16_at(0x3A)?, u16_at(0x3C)?, u16_at(0x3E)?);
    // (name offset, file offset, size) of section i
    let header = |i: usize| -> Result<(usize, usize, usize), String> {
        let h = shoff + i * shentsize;
        Ok((u32_at(h)?, u64_at(h + 24)?, u64_at(h + 32)?))
    };
    let (_, strtab, _) = header(shstrndx)?;
    for i in 0..shnum {
        let (name_at, offset, size) = header(i)?;
        let start = strtab + name_at;
        let end = bin[start..]
            .iter()
            .position(|&b| b == 0)
            .map(|n| start + n)
            .ok_or("section name without its end")?;
        if &bin[start..end] == name.as_bytes() {
            return Ok(Some(bytes(offset, size)?));
        }
    }
    Ok(None)
}
