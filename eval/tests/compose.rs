//! The composed benchmark corpus (`lexlip bench compose`): deterministic shards, resumable,
//! readable as WebDataset, with captions that name exactly what each picture places.

use std::path::Path;

use lexlip_corpus::Input;
use lexlip_eval::compose::{ComposeOptions, Placed, caption_of, read_sources, write_shards};
use lexlip_proto::Modality;

/// Five sources: coloured discs drawn on white, as the emoji corpus stores its pictures.
fn sources(dir: &Path) -> std::path::PathBuf {
    let colours = [
        ("red disc", [220, 30, 30]),
        ("green disc", [30, 180, 60]),
        ("blue disc", [40, 60, 220]),
        ("black disc", [10, 10, 10]),
        ("orange disc", [240, 140, 20]),
    ];
    let mut lines = String::new();
    for (i, (label, rgb)) in colours.iter().enumerate() {
        let img = image::RgbImage::from_fn(32, 32, |x, y| {
            let (dx, dy) = (x as i32 - 16, y as i32 - 16);
            if dx * dx + dy * dy < 144 {
                image::Rgb(*rgb)
            } else {
                image::Rgb([255, 255, 255])
            }
        });
        img.save(dir.join(format!("s{i}.png"))).unwrap();
        lines.push_str(&format!(
            "{{\"label\": \"{label}\", \"image\": \"s{i}.png\", \"split\": \"{}\"}}\n",
            if i == 4 { "test" } else { "train" }
        ));
    }
    let path = dir.join("sources.jsonl");
    std::fs::write(&path, lines).unwrap();
    path
}

fn shard_bytes(dir: &Path) -> Vec<Vec<u8>> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

#[test]
fn the_same_seed_gives_the_same_shards_and_captions_name_what_is_placed() {
    let tmp = tempfile::tempdir().unwrap();
    let list = sources(tmp.path());
    let sources = read_sources(&list, Some("train")).unwrap();
    assert_eq!(sources.len(), 4, "the test split is left out");
    let opts = ComposeOptions {
        images: 25,
        seed: 3,
        size: 64,
        per_shard: 10,
        quality: 90,
    };
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    let shards = write_shards(&sources, &opts, &a, &mut |_, _| {}).unwrap();
    assert_eq!(shards.len(), 3);
    write_shards(&sources, &opts, &b, &mut |_, _| {}).unwrap();
    assert_eq!(shard_bytes(&a), shard_bytes(&b), "same seed, other bytes");
    // Resumed after losing a shard: the same bytes again.
    std::fs::remove_file(&shards[1]).unwrap();
    write_shards(&sources, &opts, &a, &mut |_, _| {}).unwrap();
    assert_eq!(shard_bytes(&a), shard_bytes(&b), "a resumed run differs");
    let other = ComposeOptions { seed: 4, ..opts };
    write_shards(&sources, &other, &c, &mut |_, _| {}).unwrap();
    assert_ne!(
        shard_bytes(&a),
        shard_bytes(&c),
        "another seed, the same bytes"
    );

    // Read back as the indexer and the trainer read it: every picture, its caption and the
    // placements it was made of agree.
    let mut pictures = 0;
    let mut placements = 0;
    for item in Input::WebDataset(vec![a.clone()]).open().unwrap() {
        let item = item.unwrap();
        if item.modality != Modality::Image {
            continue;
        }
        pictures += 1;
        let objects: Vec<Placed> = item.metadata["objects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| Placed {
                label: o["label"].as_str().unwrap().to_string(),
                source: o["source"].as_u64().unwrap() as usize,
                count: o["count"].as_u64().unwrap() as usize,
            })
            .collect();
        let count: usize = objects.iter().map(|o| o.count).sum();
        assert!((1..=4).contains(&count), "{objects:?}");
        let caption = item.text.clone().unwrap();
        assert_eq!(caption, caption_of(&objects));
        for o in &objects {
            assert_eq!(o.label, sources[o.source].label);
            assert!(
                caption.contains(&o.label),
                "{caption:?} does not name {}",
                o.label
            );
        }
        placements += count;
        let bytes = item.image.unwrap().read().unwrap().into_owned();
        let img = image::load_from_memory(&bytes).unwrap();
        assert_eq!((img.width(), img.height()), (64, 64));
    }
    assert_eq!(pictures, 25);
    assert!(placements > 25, "every picture holds one source");
}

#[test]
fn bad_sources_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let list = tmp.path().join("s.jsonl");
    std::fs::write(&list, "{\"label\": \"x\"}\n").unwrap();
    let e = read_sources(&list, None).unwrap_err().to_string();
    assert!(e.contains("s.jsonl:1") && e.contains("\"image\""), "{e}");
    std::fs::write(&list, "{\"label\": \"x\", \"image\": \"missing.png\"}\n").unwrap();
    let e = read_sources(&list, None).unwrap_err().to_string();
    assert!(e.contains("missing.png"), "{e}");
    std::fs::write(&list, "").unwrap();
    let e = read_sources(&list, None).unwrap_err().to_string();
    assert!(e.contains("no source images"), "{e}");
}
