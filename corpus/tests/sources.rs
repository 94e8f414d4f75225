//! Every reader on small inputs: the exact items (ids, groups, modality, links, uris, metadata)
//! and bad items (reason, id, group) in reader order; the input signature follows the files.

use std::path::Path;

use lexlip_corpus::Input;
use lexlip_corpus::item::{ImageRef, SourceItem};
use lexlip_proto::Modality;

/// One line per item: `ok ID group=G MODALITY text=… image=… uri=… meta=…` or
/// `bad ID group=G REASON`.
fn describe(items: impl Iterator<Item = SourceItem>, root: &Path) -> Vec<String> {
    items
        .map(|i| match i {
            Ok(i) => {
                let image = i.image.as_ref().map(|r| match r {
                    ImageRef::File(p) => p.strip_prefix(root).unwrap_or(p).display().to_string(),
                    other => format!("{} bytes", other.read().unwrap().len()),
                });
                let modality = match i.modality {
                    Modality::Image => "image",
                    Modality::Text => "text",
                };
                format!(
                    "ok {} group={} {modality} text={:?} image={image:?} uri={:?} meta={}",
                    i.id,
                    i.group,
                    i.text,
                    i.uri,
                    serde_json::Value::Object(i.metadata)
                )
            }
            Err(b) => format!("bad {:?} group={:?} {}", b.id, b.group(), b.reason),
        })
        .collect()
}

#[test]
fn tsv_images_and_captions() {
    let tmp = tempfile::tempdir().unwrap();
    // Columns in another order than usual, CRLF line ends, a blank line, an absolute path.
    let abs = tmp.path().join("abs.png");
    let text = format!(
        "image_id\ttitle\tfilepath\r\n\
         a\ta dog\timgs/a.png\r\n\
         a\ta brown dog\timgs/a.png\r\n\
         \r\n\
         b\t\timgs/b.png\r\n\
         b\tgrass\timgs/b.png\r\n\
         c\tonly two fields\r\n\
         \ta caption\tx.png\r\n\
         d\ta car\t{}\r\n",
        abs.display()
    );
    let tsv = tmp.path().join("c.tsv");
    std::fs::write(&tsv, text).unwrap();
    let input = Input::Tsv {
        path: tsv.clone(),
        images_root: Some(tmp.path().join("root")),
    };
    let got = describe(input.open().unwrap(), &tmp.path().join("root"));
    let link = |id: &str| format!("{{\"image_id\":\"{id}\"}}");
    assert_eq!(
        got,
        vec![
            "ok a group=a image text=None image=Some(\"imgs/a.png\") uri=Some(\"imgs/a.png\") meta={}".to_string(),
            format!("ok a#0 group=a text text=Some(\"a dog\") image=None uri=None meta={}", link("a")),
            format!("ok a#1 group=a text text=Some(\"a brown dog\") image=None uri=None meta={}", link("a")),
            "ok b group=b image text=None image=Some(\"imgs/b.png\") uri=Some(\"imgs/b.png\") meta={}".to_string(),
            "bad Some(\"b#0\") group=Some(\"b\") empty_caption".to_string(),
            format!("ok b#1 group=b text text=Some(\"grass\") image=None uri=None meta={}", link("b")),
            "bad None group=None bad_line".to_string(),
            "bad None group=None bad_id".to_string(),
            format!(
                "ok d group=d image text=None image=Some({:?}) uri=Some({:?}) meta={{}}",
                abs.display().to_string(),
                abs.display().to_string()
            ),
            format!("ok d#0 group=d text text=Some(\"a car\") image=None uri=None meta={}", link("d")),
        ]
    );

    // Without --images-root, paths are relative to the TSV's directory.
    let input = Input::Tsv {
        path: tsv.clone(),
        images_root: None,
    };
    let first = input.open().unwrap().next().unwrap().unwrap();
    assert!(matches!(first.image, Some(ImageRef::File(p)) if p == tmp.path().join("imgs/a.png")));

    // A header without the three columns is an error naming the file.
    std::fs::write(&tsv, "caption\tpath\nx\ty\n").unwrap();
    let err = Input::Tsv {
        path: tsv.clone(),
        images_root: None,
    }
    .open()
    .err()
    .unwrap();
    assert!(err.to_string().contains("c.tsv"), "{err}");
}

#[test]
fn manifest_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("sub/m.jsonl");
    std::fs::create_dir_all(tmp.path().join("sub")).unwrap();
    std::fs::write(
        &path,
        concat!(
            "{\"id\": \"p1\", \"image\": \"i/1.jpg\", \"text\": \"a cat\", \"metadata\": {\"k\": 1}}\n",
            "{\"id\": \"p2\", \"image\": \"i/2.jpg\", \"uri\": \"http://x/2.jpg\"}\n",
            "{\"id\": \"t1\", \"text\": \"just text\"}\n",
            "\n",
            "{\"id\": \"t2\", \"text\": \"  \"}\n",
            "{\"id\": \"p3\", \"image\": \"i/3.jpg\", \"text\": \"\"}\n",
            "{\"id\": \"x\"}\n",
            "{\"id\": \"\", \"text\": \"no id\"}\n",
            "{\"id\": \"y\", \"text\": \"t\", \"colour\": \"unknown field\"}\n",
            "[1, 2]\n",
        ),
    )
    .unwrap();
    let got = describe(
        Input::Manifest(path.clone()).open().unwrap(),
        &tmp.path().join("sub"),
    );
    assert_eq!(
        got,
        vec![
            "ok p1 group=p1 image text=Some(\"a cat\") image=Some(\"i/1.jpg\") uri=Some(\"i/1.jpg\") meta={\"k\":1}",
            "ok p1#text group=p1 text text=Some(\"a cat\") image=None uri=None meta={\"image_id\":\"p1\",\"k\":1}",
            "ok p2 group=p2 image text=None image=Some(\"i/2.jpg\") uri=Some(\"http://x/2.jpg\") meta={}",
            "ok t1 group=t1 text text=Some(\"just text\") image=None uri=None meta={}",
            "bad Some(\"t2\") group=Some(\"t2\") empty_caption",
            "ok p3 group=p3 image text=Some(\"\") image=Some(\"i/3.jpg\") uri=Some(\"i/3.jpg\") meta={}",
            "bad Some(\"p3#text\") group=Some(\"p3\") empty_caption",
            "bad Some(\"x\") group=Some(\"x\") bad_line",
            "bad None group=None bad_id",
            "bad None group=None bad_line",
            "bad None group=None bad_line",
        ]
    );
}

fn tar_with(path: &Path, members: &[(&str, &[u8])]) {
    let mut b = tar::Builder::new(std::fs::File::create(path).unwrap());
    for (name, data) in members {
        lexlip_corpus::sources::webdataset::append_member(&mut b, name, data).unwrap();
    }
    b.finish().unwrap();
}

#[test]
fn webdataset_samples_in_shard_order() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shards");
    std::fs::create_dir_all(&dir).unwrap();
    tar_with(
        &dir.join("00001.tar"),
        &[
            ("out/000010000.jpg", b"jpegbytes"),
            ("out/000010000.txt", b"  a red car \n"),
            (
                "out/000010000.json",
                b"{\"url\": \"http://x\", \"width\": 8}",
            ),
            ("out/000010001.txt", b"caption without image"),
            ("out/000010002.webp", b"webp"),
            ("out/000010002.txt", b""),
            ("out/000010002.json", b"not json"),
        ],
    );
    tar_with(
        &dir.join("00000.tar"),
        &[("000000000.png", b"png"), ("000000000.json", b"{}")],
    );
    std::fs::write(dir.join("notes.md"), "not a shard").unwrap();
    let input = Input::WebDataset(vec![dir.clone()]);
    let got = describe(input.open().unwrap(), tmp.path());
    let s0 = dir.join("00000.tar").display().to_string();
    let s1 = dir.join("00001.tar").display().to_string();
    assert_eq!(
        got,
        vec![
            format!("ok 000000000 group=000000000 image text=None image=Some(\"3 bytes\") uri=Some(\"{s0}#000000000\") meta={{}}"),
            format!("ok 000010000 group=000010000 image text=Some(\"a red car\") image=Some(\"9 bytes\") uri=Some(\"{s1}#000010000\") meta={{\"url\":\"http://x\",\"width\":8}}"),
            "ok 000010000#text group=000010000 text text=Some(\"a red car\") image=None uri=None meta={\"image_id\":\"000010000\",\"url\":\"http://x\",\"width\":8}".to_string(),
            "bad Some(\"000010001\") group=Some(\"000010001\") missing_file".to_string(),
            format!("ok 000010002 group=000010002 image text=Some(\"\") image=Some(\"4 bytes\") uri=Some(\"{s1}#000010002\") meta={{}}"),
            "bad Some(\"000010002#text\") group=Some(\"000010002\") empty_caption".to_string(),
        ]
    );
    // Images are referred to in their shard, not held, and read back byte for byte.
    let images: Vec<Vec<u8>> = input
        .open()
        .unwrap()
        .filter_map(|i| i.ok()?.image)
        .map(|r| {
            assert!(matches!(r, ImageRef::Member { .. }), "{r:?}");
            r.read().unwrap().into_owned()
        })
        .collect();
    assert_eq!(images, [&b"png"[..], b"jpegbytes", b"webp"]);
    // A truncated shard yields what it holds, then one bad item; the next shard still follows.
    let bytes = std::fs::read(dir.join("00001.tar")).unwrap();
    std::fs::write(dir.join("00000.tar"), &bytes[..700]).unwrap();
    let got = describe(input.open().unwrap(), tmp.path());
    assert!(got[0].starts_with("bad"), "{got:?}");
    assert!(got[1].starts_with("ok 000010000 "), "{got:?}");
    assert!(
        Input::WebDataset(vec![tmp.path().join("absent")])
            .open()
            .is_err()
    );
}

#[test]
fn image_directory_recursive_sorted() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("b/c")).unwrap();
    for f in [
        "z.PNG",
        "a.jpg",
        "b/c/d.webp",
        "b/x.jpeg",
        "readme.txt",
        "b/noext",
    ] {
        std::fs::write(root.join(f), b"x").unwrap();
    }
    let got: Vec<String> = Input::ImageDir(root.to_path_buf())
        .open()
        .unwrap()
        .map(|i| {
            let i = i.unwrap();
            assert_eq!(i.uri.as_deref(), Some(i.id.as_str()));
            i.id
        })
        .collect();
    assert_eq!(got, ["a.jpg", "b/c/d.webp", "b/x.jpeg", "z.PNG"]);
    assert!(Input::ImageDir(root.join("a.jpg")).open().is_err());
}

#[test]
fn signature_follows_the_files() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("a.png"), b"x").unwrap();
    let input = Input::ImageDir(tmp.path().to_path_buf());
    let before = input.signature().unwrap();
    assert_eq!(input.signature().unwrap(), before);
    std::fs::write(tmp.path().join("b.png"), b"y").unwrap();
    assert_ne!(input.signature().unwrap(), before);

    let m = tmp.path().join("m.jsonl");
    std::fs::write(&m, "{\"id\": \"a\", \"text\": \"x\"}\n").unwrap();
    let input = Input::Manifest(m.clone());
    let before = input.signature().unwrap();
    std::fs::write(&m, "{\"id\": \"a\", \"text\": \"xy\"}\n").unwrap();
    assert_ne!(input.signature().unwrap(), before);
}

#[test]
fn webdataset_shard_patterns() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for n in [0, 1, 2, 10] {
        tar_with(
            &d.join(format!("{n:05}.tar")),
            &[(&format!("{n}.png") as &str, b"x")],
        );
    }
    std::fs::write(d.join("00003.txt"), "not a shard").unwrap();
    let names = |pattern: &str| -> Result<Vec<String>, String> {
        lexlip_corpus::sources::webdataset::shards(&[d.join(pattern)])
            .map(|v| {
                v.iter()
                    .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                    .collect()
            })
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        names("*.tar").unwrap(),
        ["00000.tar", "00001.tar", "00002.tar", "00010.tar"]
    );
    assert_eq!(
        names("0000?.tar").unwrap(),
        ["00000.tar", "00001.tar", "00002.tar"]
    );
    assert_eq!(
        names("{00001..00002}.tar").unwrap(),
        ["00001.tar", "00002.tar"]
    );
    let err = names("{00000..00003}.tar").unwrap_err();
    assert!(err.contains("00003.tar"), "{err}");
    assert!(names("*.tgz").unwrap_err().contains("no shard matches"));
    // Items follow the shards' order.
    let ids: Vec<String> =
        Input::WebDataset(vec![d.join("{00000..00002}.tar"), d.join("00010.tar")])
            .open()
            .unwrap()
            .map(|i| i.unwrap().id)
            .collect();
    assert_eq!(ids, ["0", "1", "2", "10"]);
}

#[test]
fn gzip_tsv_and_manifest_read_like_plain_ones() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let tsv = "title\tfilepath\timage_id\na dog\tx/1.png\t1\na cat\tx/1.png\t1\n\tx/2.png\t2\n";
    let manifest = "{\"id\": \"a\", \"image\": \"x/1.png\", \"text\": \"a dog\"}\n{bad\n";
    let gz = |name: &str, text: &str| {
        let path = tmp.path().join(name);
        let mut w = flate2::write::GzEncoder::new(
            std::fs::File::create(&path).unwrap(),
            flate2::Compression::default(),
        );
        w.write_all(text.as_bytes()).unwrap();
        w.finish().unwrap();
        path
    };
    std::fs::write(tmp.path().join("c.tsv"), tsv).unwrap();
    std::fs::write(tmp.path().join("m.jsonl"), manifest).unwrap();
    let tsv_gz = gz("c.tsv.gz", tsv);
    let manifest_gz = gz("m.jsonl.gz", manifest);
    let items = |input: Input| describe(input.open().unwrap(), tmp.path());
    let plain = items(Input::Tsv {
        path: tmp.path().join("c.tsv"),
        images_root: None,
    });
    assert_eq!(plain.len(), 5);
    assert_eq!(
        items(Input::Tsv {
            path: tsv_gz,
            images_root: None
        }),
        plain
    );
    let plain = items(Input::Manifest(tmp.path().join("m.jsonl")));
    assert_eq!(plain.len(), 3);
    assert_eq!(items(Input::Manifest(manifest_gz)), plain);
    // A directory given as a file is an error naming it.
    let err = Input::Manifest(tmp.path().to_path_buf())
        .open()
        .err()
        .unwrap();
    assert!(err.to_string().contains("directory"), "{err}");
}
