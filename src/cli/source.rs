//! Where the CLI's input comes from: a file, or stdin for `-`. The only
//! place that opens either; what is read goes to the pure readers of
//! `crate::input` (bounded, checked as it arrives).

use std::path::Path;

use crate::comparator::slim::SlimPod;
use crate::input::{
    pods_from_reader, read_bounded, Expect, InputError, InputLimits, ServerVersion,
};

/// Reads a file, or stdin for `-`, through [`read_bounded`].
pub fn read_source_limited(
    path: &str,
    max_bytes: u64,
    expect: Expect,
) -> Result<(String, String), InputError> {
    if path == "-" {
        let name = "<stdin>";
        let text = read_bounded(name, std::io::stdin().lock(), max_bytes, 0, expect)?;
        return Ok((name.into(), text));
    }
    let (file, size) = open_within_limit(path, max_bytes)?;
    let text = read_bounded(path, file, max_bytes, size, expect)?;
    Ok((path.to_string(), text))
}

/// Opens a file for a bounded reader. A regular file's size is known, so
/// one past `max_bytes` is refused before a byte is read; returns the file
/// and that size (0 when unknown: a pipe, a device).
pub fn open_within_limit(path: &str, max_bytes: u64) -> Result<(std::fs::File, u64), InputError> {
    let file = std::fs::File::open(Path::new(path)).map_err(|error| InputError::Io {
        source_name: path.to_string(),
        error,
    })?;
    let size = file
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .unwrap_or(0);
    if size > max_bytes {
        return Err(InputError::TooLarge {
            source_name: path.to_string(),
            limit: max_bytes,
            size: Some(size),
        });
    }
    Ok((file, size))
}

/// Reads pods from a file, or stdin for `-`, for `predict`: the source's
/// name, the pods and the Kubernetes version the input carries, if any.
pub fn read_pods_slim(
    path: &str,
    limits: InputLimits,
) -> Result<(String, Vec<SlimPod>, Option<ServerVersion>), InputError> {
    if path == "-" {
        let name = "<stdin>";
        let (pods, version) = pods_from_reader(name, std::io::stdin().lock(), limits, 0)?;
        return Ok((name.into(), pods, version));
    }
    let (file, size) = open_within_limit(path, limits.bytes)?;
    let (pods, version) = pods_from_reader(path, file, limits, size)?;
    Ok((path.to_string(), pods, version))
}
