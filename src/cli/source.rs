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
        let text = read_bounded(name, stdin(), max_bytes, 0, expect)?;
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

/// A file the binary carries (the bundled example), read as the same file
/// on disk would be: refused past `max_bytes` before a byte is read, then
/// through [`read_bounded`].
pub fn read_embedded_limited(
    (name, text): (&str, &str),
    max_bytes: u64,
    expect: Expect,
) -> Result<String, InputError> {
    embedded_within_limit(name, text, max_bytes)?;
    read_bounded(name, text.as_bytes(), max_bytes, text.len() as u64, expect)
}

/// [`open_within_limit`] for a file the binary carries.
pub fn embedded_within_limit(name: &str, text: &str, max_bytes: u64) -> Result<(), InputError> {
    let size = text.len() as u64;
    if size > max_bytes {
        return Err(InputError::TooLarge {
            source_name: name.to_string(),
            limit: max_bytes,
            size: Some(size),
        });
    }
    Ok(())
}

/// Reads pods from a file, or stdin for `-`, for `predict`: the source's
/// name, the pods and the Kubernetes version the input carries, if any.
pub fn read_pods_slim(
    path: &str,
    limits: InputLimits,
) -> Result<(String, Vec<SlimPod>, Option<ServerVersion>), InputError> {
    if path == "-" {
        let name = "<stdin>";
        let (pods, version) = pods_from_reader(name, stdin(), limits, 0)?;
        return Ok((name.into(), pods, version));
    }
    let (file, size) = open_within_limit(path, limits.bytes)?;
    let (pods, version) = pods_from_reader(path, file, limits, size)?;
    Ok((path.to_string(), pods, version))
}

/// Standard input, ended for good at its first end. On a terminal, Ctrl-D
/// ends one read only: a reader that asks again to be sure the input is over
/// (the format sniffing does) waited for a second Ctrl-D.
pub fn stdin() -> EndOnce<std::io::StdinLock<'static>> {
    EndOnce {
        inner: std::io::stdin().lock(),
        ended: false,
    }
}

/// A reader that answers "end" for good once its source has.
pub struct EndOnce<R> {
    inner: R,
    ended: bool,
}

impl<R: std::io::Read> std::io::Read for EndOnce<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.ended {
            return Ok(0);
        }
        let n = self.inner.read(buf)?;
        self.ended = n == 0 && !buf.is_empty();
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    /// A source that ends once, then has more (a terminal after Ctrl-D).
    struct Terminal(Vec<&'static [u8]>);

    impl Read for Terminal {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let Some(chunk) = self.0.first().copied() else {
                panic!("read after the input was over: a terminal would wait here");
            };
            self.0.remove(0);
            buf[..chunk.len()].copy_from_slice(chunk);
            Ok(chunk.len())
        }
    }

    #[test]
    fn the_first_end_is_the_end() {
        let mut r = super::EndOnce {
            inner: Terminal(vec![b"ab", b"", b"never read"]),
            ended: false,
        };
        let mut out = String::new();
        r.read_to_string(&mut out).unwrap();
        assert_eq!(out, "ab");
        assert_eq!(r.read(&mut [0u8; 8]).unwrap(), 0);
    }
}
