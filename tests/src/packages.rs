//! npm-style tarballs (`.tgz`) for the demo's tests: files under `package/`, as the registry
//! ships them, made here so that no test needs the network.

use std::io::Write;
use std::path::Path;

use flate2::Compression;
use flate2::write::GzEncoder;

/// Writes a gzipped tar at `path` holding `files` (archive path, bytes).
pub fn tgz<S: AsRef<str>>(path: &Path, files: &[(S, Vec<u8>)]) {
    let gz = GzEncoder::new(std::fs::File::create(path).unwrap(), Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for (name, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, name.as_ref(), bytes.as_slice())
            .unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap().flush().unwrap();
}
