//! The staged pipeline with the tiny LexLIP checkpoint (text and image encoders sharing one
//! term space) on a generated manifest corpus: exact counts and skipped items, batched ==
//! one-by-one, a crash right before a commit then resume == a clean run (collection, counts,
//! skipped items), a stop request, shards merged == the whole, merge refusals.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lexlip_index::{Collection, CollectionSettings};
use lexlip_model::{Device, Encoders};
use lexlip_pipeline::{BadItem, Input, Observer, Options, PipelineError, Summary};

fn encoders() -> Encoders {
    Encoders::load(&lexlip_tests::lexlip_tiny_checkpoint(), &Device::Cpu).unwrap()
}

fn settings(scale: f32) -> CollectionSettings {
    CollectionSettings {
        scale,
        top_k_terms: None,
        dense_dim: None,
        ..CollectionSettings::default()
    }
}

fn collection(dir: &Path, enc: &Encoders, scale: f32) -> Collection {
    let tokens = enc.text().unwrap().vocabulary().tokens().to_vec();
    let space = enc.term_space().unwrap().clone();
    Collection::create(dir, space, settings(scale), Some(&tokens)).unwrap()
}

fn png(seed: u32) -> Vec<u8> {
    lexlip_tests::png(seed, 24)
}

const WORDS: &[&str] = &["dog", "cat", "red", "car", "grass", "man", "table", "blue"];

/// A manifest of `n` images with captions (→ 2n items), then: a corrupt image, a missing file,
/// an empty caption (its image is fine), a duplicate id, a malformed line.
/// Returns (manifest, items, indexed, skipped by reason).
fn corpus(dir: &Path, n: usize) -> (PathBuf, u64, u64, BTreeMap<String, u64>) {
    std::fs::create_dir_all(dir.join("img")).unwrap();
    let mut m = String::new();
    for i in 0..n {
        std::fs::write(dir.join(format!("img/{i}.png")), png(i as u32)).unwrap();
        m.push_str(&format!(
            "{{\"id\": \"p{i}\", \"image\": \"img/{i}.png\", \"text\": \"a {} and a {}\", \"metadata\": {{\"i\": {i}}}}}\n",
            WORDS[i % 8],
            WORDS[(i / 8) % 8]
        ));
    }
    std::fs::write(dir.join("img/bad.png"), b"\x89PNGtruncated").unwrap();
    m.push_str("{\"id\": \"corrupt\", \"image\": \"img/bad.png\"}\n");
    m.push_str("{\"id\": \"missing\", \"image\": \"img/nowhere.png\"}\n");
    m.push_str("{\"id\": \"blank\", \"image\": \"img/0.png\", \"text\": \" \"}\n");
    m.push_str("{\"id\": \"p1\", \"text\": \"p1 again\"}\n");
    m.push_str("{\"id\": 7}\n");
    let path = dir.join("manifest.jsonl");
    std::fs::write(&path, m).unwrap();
    let skipped: BTreeMap<String, u64> = [
        ("bad_line", 1),
        ("corrupt_image", 1),
        ("duplicate_id", 1),
        ("empty_caption", 1),
        ("missing_file", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let items = 2 * n as u64 + 6;
    (path, items, items - 5, skipped)
}

/// Records skipped items like an errors file (mark = lines written), and can fail right
/// before a given commit (a crash) or request a stop after some items.
#[derive(Default)]
struct Recorder {
    lines: Vec<String>,
    checkpoints: usize,
    crash_at_checkpoint: Option<usize>,
    stop_after: Option<(u64, Arc<AtomicBool>)>,
    rewound_to: Option<u64>,
}

impl Observer for Recorder {
    fn skipped(&mut self, position: u64, bad: &BadItem) -> lexlip_pipeline::Result<()> {
        self.lines
            .push(format!("{position} {:?} {}", bad.id, bad.reason));
        Ok(())
    }

    fn progress(&mut self, read: u64, _indexed: u64) {
        if let Some((n, flag)) = &self.stop_after
            && read >= *n
        {
            flag.store(true, Ordering::Relaxed);
        }
    }

    fn checkpoint(&mut self) -> lexlip_pipeline::Result<u64> {
        self.checkpoints += 1;
        if self.crash_at_checkpoint == Some(self.checkpoints) {
            return Err(PipelineError::Stage("simulated crash".into()));
        }
        Ok(self.lines.len() as u64)
    }

    fn rewind(&mut self, mark: u64) -> lexlip_pipeline::Result<()> {
        self.rewound_to = Some(mark);
        self.lines.truncate(mark as usize);
        Ok(())
    }
}

/// Every live document of a collection (reopened: what a new process would see).
fn contents(c: &Collection) -> BTreeMap<String, String> {
    lexlip_tests::contents(c.dir())
}

fn options(batch: usize, commit_every: usize) -> Options {
    Options {
        batch_size: batch,
        commit_every,
        ..Options::default()
    }
}

/// Indexes `input` into `c` with `opts`, its skipped items recorded where nobody reads them.
fn index(input: &Input, enc: &Encoders, c: &Collection, opts: &Options) -> Summary {
    lexlip_pipeline::index_corpus(input, enc, c, opts, &mut Recorder::default()).unwrap()
}

/// A temporary directory with a [`corpus`] of `n` images, the encoders, and the manifest as
/// the pipeline's input.
fn setup(n: usize) -> (tempfile::TempDir, Encoders, Input) {
    let tmp = tempfile::tempdir().unwrap();
    let (manifest, ..) = corpus(tmp.path(), n);
    (tmp, encoders(), Input::Manifest(manifest))
}

fn counts(s: &Summary) -> (u64, u64, BTreeMap<String, u64>) {
    (s.read, s.indexed, s.skipped.clone())
}

#[test]
fn counts_skips_and_batched_equals_one_by_one() {
    let tmp = tempfile::tempdir().unwrap();
    let enc = encoders();
    let (manifest, items, indexed, skipped) = corpus(tmp.path(), 20);
    let input = Input::Manifest(manifest);
    let c8 = collection(&tmp.path().join("c8"), &enc, 100.0);
    let mut rec = Recorder::default();
    let s = lexlip_pipeline::index_corpus(&input, &enc, &c8, &options(8, 1000), &mut rec).unwrap();
    assert_eq!(counts(&s), (items, indexed, skipped));
    assert_eq!(s.processed, items);
    assert!(!s.interrupted && !s.already_complete);
    assert_eq!(
        rec.lines,
        [
            "40 Some(\"corrupt\") corrupt_image",
            "41 Some(\"missing\") missing_file",
            "43 Some(\"blank#text\") empty_caption",
            "44 Some(\"p1\") duplicate_id",
            "45 None bad_line",
        ]
    );
    let docs = contents(&c8);
    assert_eq!(docs.len() as u64, indexed);
    let p3 = &docs["p3"];
    assert!(p3.starts_with("Image|Some(\"a car and a dog\")|"), "{p3}");
    assert!(p3.contains("|{\"i\": Number(3)}|"), "{p3}");
    assert!(docs["p3#text"].contains("\"image_id\": String(\"p3\")"));
    assert!(!docs["p3"].ends_with("[]"), "an image has terms");

    // The same corpus encoded one item at a time gives the same collection.
    let c1 = collection(&tmp.path().join("c1"), &enc, 100.0);
    let s1 = index(&input, &enc, &c1, &options(1, 7));
    assert_eq!(counts(&s1), counts(&s));
    assert_eq!(contents(&c1), docs);

    // Finished: a re-run does nothing and reports the job; --restart does it again.
    let again =
        lexlip_pipeline::index_corpus(&input, &enc, &c8, &options(8, 1000), &mut rec).unwrap();
    assert!(again.already_complete);
    assert_eq!((counts(&again), again.processed), (counts(&s), 0));
    let mut restart = options(8, 1000);
    restart.restart = true;
    let mut rec2 = Recorder::default();
    let r = lexlip_pipeline::index_corpus(&input, &enc, &c8, &restart, &mut rec2).unwrap();
    assert_eq!((counts(&r), r.processed), (counts(&s), items));
    assert_eq!(rec2.rewound_to, Some(0));
    assert_eq!(contents(&c8), docs);
}

#[test]
fn crash_before_a_commit_then_resume_equals_clean() {
    let (tmp, enc, input) = setup(30);
    let opts = options(4, 10);
    let clean = collection(&tmp.path().join("clean"), &enc, 100.0);
    let mut clean_rec = Recorder::default();
    let s = lexlip_pipeline::index_corpus(&input, &enc, &clean, &opts, &mut clean_rec).unwrap();

    // Crash before the first commit, a middle one, and the final one.
    for crash_at in [1, 3, clean_rec.checkpoints] {
        let dir = tmp.path().join(format!("crash{crash_at}"));
        let c = collection(&dir, &enc, 100.0);
        let mut rec = Recorder {
            crash_at_checkpoint: Some(crash_at),
            ..Recorder::default()
        };
        let err = lexlip_pipeline::index_corpus(&input, &enc, &c, &opts, &mut rec).unwrap_err();
        assert!(err.to_string().contains("simulated crash"));
        drop(c);
        // The next process: the same errors file (rec.lines), a fresh collection handle.
        let c = Collection::open(&dir).unwrap();
        rec.crash_at_checkpoint = None;
        let r = lexlip_pipeline::index_corpus(&input, &enc, &c, &opts, &mut rec).unwrap();
        assert_eq!(r.resumed_from > 0, crash_at > 1, "crash at {crash_at}");
        assert_eq!(counts(&r), counts(&s), "crash at {crash_at}");
        assert_eq!(r.processed, s.read - r.resumed_from);
        assert_eq!(rec.lines, clean_rec.lines, "crash at {crash_at}");
        assert_eq!(contents(&c), contents(&clean), "crash at {crash_at}");
    }
}

#[test]
fn stop_request_commits_and_resumes() {
    let (tmp, enc, input) = setup(15);
    let clean = collection(&tmp.path().join("clean"), &enc, 100.0);
    let s = index(&input, &enc, &clean, &options(4, 1000));

    let c = collection(&tmp.path().join("stopped"), &enc, 100.0);
    let flag = Arc::new(AtomicBool::new(false));
    // One item per chunk: the reader runs at most a few chunks ahead of the writer.
    let mut opts = options(1, 1000);
    opts.stop = Some(flag.clone());
    let mut rec = Recorder {
        stop_after: Some((4, flag.clone())),
        ..Recorder::default()
    };
    let first = lexlip_pipeline::index_corpus(&input, &enc, &c, &opts, &mut rec).unwrap();
    assert!(first.interrupted);
    // The chunk being written when the stop came is the last one (chunks of one item here).
    assert_eq!(first.read, 4, "{first:?}");
    // What was read is committed (no commit_every reached: the stop commits).
    assert_eq!(
        Collection::open(c.dir())
            .unwrap()
            .snapshot()
            .unwrap()
            .num_docs(),
        first.indexed
    );
    // A stop requested before the reader has passed over what the first run committed ends
    // the run there: nothing more is indexed, and the next run still resumes after it.
    let early = lexlip_pipeline::index_corpus(&input, &enc, &c, &opts, &mut rec).unwrap();
    assert!(early.interrupted);
    assert_eq!((early.read, early.indexed), (first.read, first.indexed));
    flag.store(false, Ordering::Relaxed);
    rec.stop_after = None;
    let r = lexlip_pipeline::index_corpus(&input, &enc, &c, &opts, &mut rec).unwrap();
    assert!(!r.interrupted);
    assert_eq!(counts(&r), counts(&s));
    assert_eq!(contents(&c), contents(&clean));
}

#[test]
fn shards_merge_into_the_whole() {
    let (tmp, enc, input) = setup(24);
    let whole = collection(&tmp.path().join("whole"), &enc, 100.0);
    let s = index(&input, &enc, &whole, &options(8, 1000));
    let mut parts = Vec::new();
    let (mut read, mut indexed) = (0, 0);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..3 {
        let dir = tmp.path().join(format!("part{i}"));
        let c = collection(&dir, &enc, 100.0);
        let mut opts = options(8, 1000);
        opts.shard = Some(format!("{i}/3").parse().unwrap());
        let p = index(&input, &enc, &c, &opts);
        read += p.read;
        indexed += p.indexed;
        for id in contents(&c).into_keys() {
            assert!(seen.insert(id, i).is_none(), "an id in two shards");
        }
        parts.push(dir);
    }
    assert_eq!((read, indexed), (s.read, s.indexed));
    // An image and its caption land in the same shard.
    for (id, shard) in &seen {
        if let Some(image) = id.strip_suffix("#text") {
            assert_eq!(seen.get(image), Some(shard), "{id}");
        }
    }
    let out = tmp.path().join("merged");
    let inputs: Vec<&Path> = parts.iter().map(PathBuf::as_path).collect();
    let report = lexlip_pipeline::merge(&out, &inputs).unwrap();
    assert_eq!(report.documents, s.indexed);
    assert_eq!(report.copied.iter().sum::<u64>(), s.indexed);
    assert_eq!(contents(&Collection::open(&out).unwrap()), contents(&whole));
    // A new output is built aside and renamed into place: nothing else is left beside it.
    let beside: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("merging"))
        .collect();
    assert!(beside.is_empty(), "{beside:?}");
    // A directory that holds something else is not merged into.
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    let e = lexlip_pipeline::merge(&other, &inputs)
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not a collection"), "{e}");
    assert_eq!(std::fs::read_dir(&other).unwrap().count(), 1);
}

#[test]
fn merge_refuses_incompatible_and_later_inputs_replace() {
    let tmp = tempfile::tempdir().unwrap();
    let enc = encoders();
    let text = enc.text().unwrap();
    let add = |c: &Collection, id: &str, caption: &str| {
        let v = text.encode(&[caption]).unwrap().remove(0);
        let q = c
            .quantizer()
            .document(lexlip_proto::VectorInput::Weights(v))
            .unwrap();
        let doc = lexlip_proto::Document::new(
            lexlip_proto::DocId::new(id).unwrap(),
            lexlip_proto::Modality::Text,
        );
        c.add(doc, q).unwrap();
        c.commit().unwrap();
    };
    let a = collection(&tmp.path().join("a"), &enc, 100.0);
    let b = collection(&tmp.path().join("b"), &enc, 100.0);
    let half = collection(&tmp.path().join("half-scale"), &enc, 50.0);
    add(&a, "x", "a red car");
    add(&a, "y", "a dog");
    add(&b, "x", "a blue table");
    add(&half, "z", "grass");

    let out = tmp.path().join("out");
    let err = lexlip_pipeline::merge(&out, &[a.dir(), half.dir()]).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("a") && msg.contains("half-scale") && msg.contains("scale"),
        "{msg}"
    );
    assert!(!out.exists(), "nothing written on refusal");

    let report = lexlip_pipeline::merge(&out, &[a.dir(), b.dir()]).unwrap();
    assert_eq!(report.copied, [2, 1]);
    assert_eq!(report.documents, 2);
    let merged = contents(&Collection::open(&out).unwrap());
    assert_eq!(merged["x"], contents(&b)["x"]);
    assert_eq!(merged["y"], contents(&a)["y"]);
    // An existing output of another scale is refused too.
    assert!(lexlip_pipeline::merge(half.dir(), &[a.dir()]).is_err());
}

#[test]
fn merge_keeps_dense_vectors_and_refuses_another_dimension() {
    let tmp = tempfile::tempdir().unwrap();
    let space = lexlip_proto::TermSpace::from_tokens("toy", ["[PAD]", "dog", "cat", "car"]);
    let tokens: Vec<String> = ["[PAD]", "dog", "cat", "car"].map(String::from).to_vec();
    let make = |name: &str, dim: usize| {
        let mut s = settings(100.0);
        s.dense_dim = Some(dim);
        Collection::create(&tmp.path().join(name), space.clone(), s, Some(&tokens)).unwrap()
    };
    let add = |c: &Collection, id: &str, terms: &[(&str, u64)], dense: Vec<f32>| {
        let doc = lexlip_proto::Document::new(
            lexlip_proto::DocId::new(id).unwrap(),
            lexlip_proto::Modality::Image,
        );
        let q = lexlip_proto::QuantizedVector::new(terms.iter().copied()).unwrap();
        let d = lexlip_proto::DenseVector::new(dense).unwrap();
        c.add_with_dense(doc, q, Some(d)).unwrap();
        c.commit().unwrap();
    };
    let a = make("a", 3);
    let b = make("b", 3);
    let wide = make("wide", 4);
    add(&a, "x", &[("dog", 120), ("cat", 7)], vec![3.0, 0.0, 4.0]);
    add(&b, "y", &[("car", 50)], vec![0.0, 1.0, 0.0]);
    add(&wide, "z", &[("car", 5)], vec![1.0, 1.0, 1.0, 1.0]);

    let out = tmp.path().join("out");
    let err = lexlip_pipeline::merge(&out, &[a.dir(), wide.dir()]).unwrap_err();
    assert!(err.to_string().contains("dense dimension"), "{err}");
    assert!(!out.exists());

    lexlip_pipeline::merge(&out, &[a.dir(), b.dir()]).unwrap();
    let merged = Collection::open(&out).unwrap();
    assert_eq!(merged.manifest().settings.dense_dim, Some(3));
    let snap = merged.snapshot().unwrap();
    let x = snap.get("x", true).unwrap().unwrap();
    assert_eq!(
        x.dense,
        Some(vec![0.6, 0.0, 0.8]),
        "stored L2-normalised, copied as is"
    );
    let impacts = x.impacts.unwrap();
    assert_eq!(
        (impacts.get("dog"), impacts.get("cat")),
        (Some(120), Some(7))
    );
    assert_eq!(
        snap.get("y", true).unwrap().unwrap().dense,
        Some(vec![0.0, 1.0, 0.0])
    );
}

#[test]
fn documents_read_back_in_windows_match_get() {
    // Merge reads documents back window by window; any window size gives what `get` gives.
    let tmp = tempfile::tempdir().unwrap();
    let words = ["[PAD]", "a", "b", "c", "d", "e", "f", "g"];
    let space = lexlip_proto::TermSpace::from_tokens("toy", words);
    let tokens: Vec<String> = words.map(String::from).to_vec();
    let c = Collection::create(tmp.path(), space, settings(100.0), Some(&tokens)).unwrap();
    for round in 0..3u64 {
        for i in 0..40u64 {
            if (i + round) % 3 != 0 {
                continue;
            }
            let terms: Vec<(&str, u64)> = (1..8)
                .filter(|t| (i * 7 + t * round) % 3 != 1)
                .map(|t| (words[t as usize], 1 + (i * t + round) % 200))
                .collect();
            let doc = lexlip_proto::Document::new(
                lexlip_proto::DocId::new(format!("d{i}")).unwrap(),
                lexlip_proto::Modality::Text,
            );
            c.add(doc, lexlip_proto::QuantizedVector::new(terms).unwrap())
                .unwrap();
        }
        c.delete(&lexlip_proto::DocId::new(format!("d{}", round * 9)).unwrap())
            .unwrap();
        c.commit().unwrap(); // one segment per round, with replaced and deleted documents
    }
    let snap = c.snapshot().unwrap();
    let read = |window: u32| {
        let mut out = Vec::new();
        snap.for_each_document_windowed(window, |d| {
            out.push((d.doc.id.to_string(), d.impacts.unwrap()));
            Ok(())
        })
        .unwrap();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    };
    let whole = read(u32::MAX);
    assert_eq!(whole.len() as u64, snap.num_docs());
    for (id, impacts) in &whole {
        let got = snap.get(id, true).unwrap().unwrap();
        assert_eq!(got.impacts.as_ref(), Some(impacts), "{id}");
    }
    for window in [1, 2, 3, 7, 64] {
        assert_eq!(read(window), whole, "window {window}");
    }
}

/// The thumbnail stored with a document, if any.
fn thumbnail(c: &Collection, id: &str) -> Option<Vec<u8>> {
    c.snapshot()
        .unwrap()
        .get(id, false)
        .unwrap()
        .unwrap()
        .thumbnail
}

/// Width and height of a stored JPEG thumbnail.
fn jpeg_size(bytes: &[u8]) -> (u32, u32) {
    let img = image::load_from_memory_with_format(bytes, image::ImageFormat::Jpeg).unwrap();
    (img.width(), img.height())
}

#[test]
fn corpus_images_get_thumbnails_merge_keeps_them_and_old_collections_take_part() {
    let tmp = tempfile::tempdir().unwrap();
    let enc = encoders();
    let (manifest, items, indexed, skipped) = corpus(tmp.path(), 6);
    // A 600 × 300 image, transparent but for a red square: 256 × 128 on white.
    let wide = image::RgbaImage::from_fn(600, 300, |x, y| {
        if (250..350).contains(&x) && (100..200).contains(&y) {
            image::Rgba([220, 10, 10, 255])
        } else {
            image::Rgba([0, 0, 0, 0])
        }
    });
    wide.save(tmp.path().join("img/wide.png")).unwrap();
    let mut text = std::fs::read_to_string(&manifest).unwrap();
    text.push_str("{\"id\": \"wide\", \"image\": \"img/wide.png\"}\n");
    std::fs::write(&manifest, text).unwrap();
    let input = Input::Manifest(manifest);

    let on = collection(&tmp.path().join("on"), &enc, 100.0);
    let s = index(&input, &enc, &on, &options(4, 1000));
    // Thumbnails change nothing about what is indexed or skipped.
    assert_eq!(counts(&s), (items + 1, indexed + 1, skipped));
    assert_eq!(jpeg_size(&thumbnail(&on, "p2").unwrap()), (24, 24));
    let wide_jpeg = thumbnail(&on, "wide").unwrap();
    assert_eq!(jpeg_size(&wide_jpeg), (256, 128));
    let rgb = image::load_from_memory(&wide_jpeg).unwrap().to_rgb8();
    assert!(
        rgb.get_pixel(3, 3).0.iter().all(|&c| c > 240),
        "composited over white"
    );
    assert_eq!(thumbnail(&on, "p2#text"), None, "captions have none");

    // Turned off for a run: none stored, the same documents otherwise.
    let off = collection(&tmp.path().join("off"), &enc, 100.0);
    let no_thumbnails = Options {
        thumbnails: false,
        ..options(4, 1000)
    };
    index(&input, &enc, &off, &no_thumbnails);
    assert_eq!(thumbnail(&off, "wide"), None);
    assert_eq!(contents(&off), contents(&on));

    // A collection made before thumbnails existed indexes the corpus as before, without them.
    let old_dir = tmp.path().join("old");
    let tokens = enc.text().unwrap().vocabulary().tokens().to_vec();
    lexlip_tests::legacy_without_thumbnails(
        &old_dir,
        enc.term_space().unwrap().clone(),
        Some(&tokens),
    );
    let old = Collection::open(&old_dir).unwrap();
    let s_old = index(&input, &enc, &old, &options(4, 1000));
    assert_eq!(counts(&s_old), counts(&s));
    assert_eq!(thumbnail(&old, "wide"), None);
    assert_eq!(contents(&old), contents(&on));

    // Merging copies thumbnails; an old input has none to give, an old output keeps none.
    let merged = tmp.path().join("merged");
    let report = lexlip_pipeline::merge(&merged, &[old.dir(), on.dir()]).unwrap();
    assert_eq!(report.documents, indexed + 1);
    let m = Collection::open(&merged).unwrap();
    assert_eq!(thumbnail(&m, "wide"), Some(wide_jpeg.clone()));
    assert_eq!(contents(&m), contents(&on));
    let from_old = tmp.path().join("from-old");
    lexlip_pipeline::merge(&from_old, &[old.dir()]).unwrap();
    let m = Collection::open(&from_old).unwrap();
    assert!(m.stores_thumbnails(), "a new output has the field");
    assert_eq!(thumbnail(&m, "wide"), None);
    drop(old);
    lexlip_pipeline::merge(&old_dir, &[on.dir()]).unwrap();
    let old = Collection::open(&old_dir).unwrap();
    assert_eq!(thumbnail(&old, "wide"), None);
    assert_eq!(contents(&old), contents(&on));
}
