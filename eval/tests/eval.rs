//! The evaluation's engine half on hand-made vectors: real collections (tantivy) per setting,
//! searched like the server searches, with recalls, non-zeros and the effect of the top-K cut
//! worked out by hand in the comments.

use std::collections::BTreeMap;

use lexlip_eval::{
    Encoded, Entry, Impacts, Mode, Queries, Relevance, Setting, SettingReport, Vector, evaluate,
};
use lexlip_proto::api::Precision;
use lexlip_proto::{DenseVector, DocId, Document, Modality, QuantizedVector, TermSpace};

fn entry(id: &str, modality: Modality, image: Option<&str>, vector: Vector) -> Entry {
    let mut doc = Document::new(DocId::new(id).unwrap(), modality);
    if let Some(i) = image {
        doc.metadata.insert("image_id".into(), i.into());
    }
    Entry {
        doc,
        vector,
        query: None,
        pixels: None,
        picture: None,
    }
}

fn sparse(pairs: &[(&str, u64)]) -> Vector {
    Vector::Sparse(Impacts::from(
        &QuantizedVector::new(pairs.iter().copied()).unwrap(),
    ))
}

/// img0 {dog, grass, x}, img1 {cat, sofa}, img2 {red, street, car}.
fn three_images() -> Vec<(&'static str, Vector)> {
    vec![
        ("img0", sparse(&[("dog", 90), ("grass", 50), ("x", 10)])),
        ("img1", sparse(&[("cat", 90), ("sofa", 50)])),
        ("img2", sparse(&[("red", 80), ("street", 70), ("car", 30)])),
    ]
}

/// Captions of [`three_images`] that two cases by hand share: t0 {dog 100} and t1 {grass 100}
/// of img0, t2 (given) of img1, t3 {car 100} and t4 {dog 99, street 50} of img2, then t5 (given,
/// with its image).
fn three_images_captions(
    t2: Vector,
    t5: (Option<usize>, Vector),
) -> Vec<(&'static str, Option<usize>, Vector)> {
    vec![
        ("t0", Some(0), sparse(&[("dog", 100)])),
        ("t1", Some(0), sparse(&[("grass", 100)])),
        ("t2", Some(1), t2),
        ("t3", Some(2), sparse(&[("car", 100)])),
        ("t4", Some(2), sparse(&[("dog", 99), ("street", 50)])),
        ("t5", t5.0, t5.1),
    ]
}

fn dense(values: &[f32]) -> Vector {
    Vector::Dense(DenseVector::new(values.to_vec()).unwrap())
}

/// Images, then (id, image, vector) texts, linked by position.
fn encoded(
    mode: Mode,
    images: Vec<(&str, Vector)>,
    texts: Vec<(&str, Option<usize>, Vector)>,
) -> Encoded {
    let image_ids: Vec<String> = images.iter().map(|(id, _)| id.to_string()).collect();
    Encoded {
        mode,
        images: images
            .into_iter()
            .map(|(id, v)| entry(id, Modality::Image, None, v))
            .collect(),
        text_image: texts.iter().map(|(_, i, _)| *i).collect(),
        texts: texts
            .into_iter()
            .map(|(id, i, v)| entry(id, Modality::Text, i.map(|i| image_ids[i].as_str()), v))
            .collect(),
        term_space: TermSpace::free("hand-made"),
        tokens: None,
        read: 0,
        skipped: BTreeMap::new(),
        encode_seconds: 0.0,
        distractors: None,
    }
}

fn run(e: &Encoded, top_k: Option<usize>) -> SettingReport {
    run_setting(
        e,
        Setting {
            top_k,
            ..Setting::default()
        },
    )
}

fn run_setting(e: &Encoded, setting: Setting) -> SettingReport {
    let tmp = tempfile::tempdir().unwrap();
    evaluate(
        e,
        setting,
        100.0,
        false,
        None,
        &tmp.path().join("c"),
        &mut (),
    )
    .unwrap()
}

fn close(a: [f64; 3], b: [f64; 3]) -> bool {
    a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12)
}

/// Three images and six texts (t5 belongs to no image). Impacts:
///
/// ```text
/// img0 {dog 90, grass 50, x 10}   img1 {cat 90, sofa 50}   img2 {red 80, street 70, car 30}
/// t0 → img0 {dog 100}             t1 → img0 {grass 100}    t2 → img1 {sofa 100, dog 10}
/// t3 → img2 {car 100}             t4 → img2 {dog 99, street 50}
/// t5 (no image) {red 100, car 90}
/// ```
///
/// Top-2 keeps img0 {dog, grass}, img1 {cat, sofa}, img2 {red, street}; texts have ≤ 2 terms.
/// Top-1 keeps img0 {dog}, img1 {cat}, img2 {red}; t2 {sofa}, t4 {dog}, t5 {red}.
/// Queries are never cut.
#[test]
fn sparse_recall_nnz_and_the_top_k_cut_by_hand() {
    let e = encoded(
        Mode::Sparse,
        three_images(),
        three_images_captions(
            sparse(&[("sofa", 100), ("dog", 10)]),
            (None, sparse(&[("red", 100), ("car", 90)])),
        ),
    );
    assert_eq!((e.t2i_queries(), e.i2t_queries()), (5, 3));

    // Full vectors.
    // T2I: t0 → img0 9000 (1st); t1 → img0 5000 (1st); t2 → img1 5000, img0 900 (1st);
    //      t3 → img2 3000 (1st); t4 → img0 8910, img2 3500 (2nd).   R@1 4/5, R@5 = R@10 = 1.
    // I2T: img0 → t0 9000 (own, 1st); img1 → t2 5000 (1st);
    //      img2 → t5 10700, t4 3500, t3 3000: first own caption 2nd.  R@1 2/3, R@5 = R@10 = 1.
    let full = run(&e, None);
    assert!(close(full.t2i, [0.8, 1.0, 1.0]), "{full:?}");
    assert!(close(full.i2t, [2.0 / 3.0, 1.0, 1.0]), "{full:?}");
    // Non-zeros: images 3 + 2 + 3, texts 1 + 1 + 2 + 1 + 2 + 2.
    assert_eq!(full.nnz_per_image, 8.0 / 3.0);
    assert_eq!(full.nnz_per_text, 9.0 / 6.0);
    assert_eq!(full.nnz_per_item, 17.0 / 9.0);
    assert_eq!(full.top_k, None);

    // Top-2. T2I: t0, t1 (grass kept), t2 (sofa kept) 1st; t3: car cut from img2 → img2 scores
    // 0 and is not returned; t4: img0 8910, img2 3500 (2nd).  R@1 3/5, R@5 = R@10 = 4/5.
    // I2T: texts unchanged → as for full vectors.
    let top2 = run(&e, Some(2));
    assert!(close(top2.t2i, [0.6, 0.8, 0.8]), "{top2:?}");
    assert!(close(top2.i2t, [2.0 / 3.0, 1.0, 1.0]), "{top2:?}");
    assert_eq!((top2.nnz_per_image, top2.nnz_per_text), (2.0, 1.5));

    // Top-1. T2I: t0 → img0 {dog} 9000 (1st); t1 → grass cut, miss; t2 → img1 {cat} scores 0,
    // img0 900 only: miss; t3 → miss; t4 → img0 only: miss.   R@1 = R@5 = R@10 = 1/5.
    // I2T: img0 → t0 9000 (1st); img1 → t2 {sofa} 5000 (1st); img2 → t5 {red} 8000, t3 3000
    // (2nd), t4 {dog} 0.   R@1 2/3, R@5 = R@10 = 1.
    let top1 = run(&e, Some(1));
    assert!(close(top1.t2i, [0.2, 0.2, 0.2]), "{top1:?}");
    assert!(close(top1.i2t, [2.0 / 3.0, 1.0, 1.0]), "{top1:?}");
    assert_eq!(
        (top1.nnz_per_image, top1.nnz_per_text, top1.nnz_per_item),
        (1.0, 1.0, 1.0)
    );

    // Approximate: hits are scored exactly, so skipping documents can only lose recall; the
    // report says how it searched.
    let approx = run_setting(
        &e,
        Setting {
            precision: Precision::Approx(1.5),
            ..Setting::default()
        },
    );
    for (a, x) in approx
        .t2i
        .iter()
        .chain(&approx.i2t)
        .zip(full.t2i.iter().chain(&full.i2t))
    {
        assert!(a <= x, "{approx:?}");
    }
    assert_eq!((approx.search, approx.approx), ("approx", Some(1.5)));
    assert_eq!(approx.label(), "full ×1.5");
    // Two queries per direction, spread evenly: t2i t0 and t2 (both 1st), i2t img0 and img1
    // (both 1st); every document stays.
    let two = run_setting(
        &e,
        Setting {
            max_queries: Some(2),
            ..Setting::default()
        },
    );
    assert_eq!((two.t2i_queries, two.i2t_queries), (2, 2));
    assert_eq!((full.t2i_queries, full.i2t_queries), (5, 3));
    assert!(
        close(two.t2i, [1.0, 1.0, 1.0]) && close(two.i2t, [1.0, 1.0, 1.0]),
        "{two:?}"
    );
    assert_eq!(two.nnz_per_item, full.nnz_per_item);
    assert_eq!(
        (full.search, full.approx, full.label().as_str()),
        ("exact", None, "full")
    );

    for s in [&full, &top2, &top1] {
        assert!(s.bytes_per_item > 0.0 && s.index_bytes > 0, "{s:?}");
        assert!(s.qps > 0.0 && s.t2i_qps > 0.0 && s.i2t_qps > 0.0, "{s:?}");
    }
}

/// Dense: unit images along the axes; cosine similarity ranks.
#[test]
fn dense_recall_by_hand() {
    let e = encoded(
        Mode::Dense,
        vec![
            ("img0", dense(&[1.0, 0.0, 0.0])),
            ("img1", dense(&[0.0, 1.0, 0.0])),
            ("img2", dense(&[0.0, 0.0, 1.0])),
        ],
        vec![
            ("t0", Some(0), dense(&[0.9, 0.1, 0.0])),
            ("t1", Some(1), dense(&[0.1, 0.2, 0.9])),
            ("t2", Some(2), dense(&[0.0, 0.0, 1.0])),
        ],
    );
    // T2I: t0 → img0 first; t1 → img2 (0.9) before img1 (0.2): 2nd; t2 → img2 first.
    // I2T (texts normalised): img0 → t0 0.99 first; img1 → t1 0.22 before t0 0.11: first;
    // img2 → t2 1.0 before t1 0.97: first.
    let s = run(&e, None);
    assert!(close(s.t2i, [2.0 / 3.0, 1.0, 1.0]), "{s:?}");
    assert!(close(s.i2t, [1.0, 1.0, 1.0]), "{s:?}");
    // Non-zero entries: images 1 each, texts 2 + 3 + 1.
    assert_eq!((s.nnz_per_image, s.nnz_per_text), (1.0, 2.0));
    assert!(s.bytes_per_item > 0.0 && s.qps > 0.0);
    // Through the HNSW graph: on three vectors it finds what the scan finds.
    let graph = run_setting(
        &e,
        Setting {
            precision: Precision::Approx(1.0),
            ..Setting::default()
        },
    );
    assert!(
        close(graph.t2i, s.t2i) && close(graph.i2t, s.i2t),
        "{graph:?}"
    );
    assert_eq!((graph.search, s.search), ("hnsw", "exact"));
    assert_eq!(graph.label(), "hnsw");
}

/// Image → image and text → text recall (`--single-modal`). Images sharing a caption wording
/// form a concept: A = {a0, a1} ("dog face" twice, the second with other case and spaces),
/// B = {b0, b1} ("cat face"), C = {c} (no sibling: no image query, and its one caption has no
/// differently worded caption in its concept: no text query).
///
/// ```text
/// a0 {dog 90, red 10}   a1 {dog 80, blue 10}   b0 {cat 90}   b1 {cat 50, dog 60}   c {car 90}
/// t0 → a0 "dog face" {dog 100, face 50}     t1 → a1 "Dog  face" {dog 90, face 60}
/// t2 → a0 "a puppy" {puppy 100, dog 31}     t3 → b0 "cat face" {cat 100, face 50}
/// t4 → b1 "cat face" {cat 90, face 60}      t5 → b1 "kitty" {kitty 100, cat 20}
/// t6 → c "car" {car 100}
/// ```
/// Captions repeated over pictures: the item rule asks for the one picture a caption was
/// written for, the caption rule for any picture of the same wording, each wording once.
///
/// ```text
/// img0 {dog 90}    img1 {dog 95}    img2 {cat 90, dog 10}
/// t0 "A dog" → img0 {dog 100}   t1 "a  dog" → img1 {dog 99}   t2 "a cat" → img2 {cat 100}
/// t3 "a cat" → img2 {cat 98}    t4 "dog" (no picture) {dog 50}
/// ```
#[test]
fn recall_when_captions_repeat_by_hand() {
    let mut e = encoded(
        Mode::Sparse,
        vec![
            ("img0", sparse(&[("dog", 90)])),
            ("img1", sparse(&[("dog", 95)])),
            ("img2", sparse(&[("cat", 90), ("dog", 10)])),
        ],
        vec![
            ("t0", Some(0), sparse(&[("dog", 100)])),
            ("t1", Some(1), sparse(&[("dog", 99)])),
            ("t2", Some(2), sparse(&[("cat", 100)])),
            ("t3", Some(2), sparse(&[("cat", 98)])),
            ("t4", None, sparse(&[("dog", 50)])),
        ],
    );
    for (t, w) in e
        .texts
        .iter_mut()
        .zip(["A dog", "a  dog", "a cat", "a cat", "dog"])
    {
        t.doc.text = Some(w.to_string());
    }
    // The item rule: every linked caption asks for its picture; each picture for its captions.
    let item = Queries::new(&e, Relevance::Item, None);
    assert_eq!(
        item.t2i,
        [(0, vec![0]), (1, vec![1]), (2, vec![2]), (3, vec![2])]
    );
    assert_eq!(item.i2t, [(0, vec![0]), (1, vec![1]), (2, vec![2, 3])]);
    // The caption rule: "a dog" (t0, t1) and "a cat" (t2, t3) asked once each, by their first
    // caption; img2 counts once although two of its captions say "a cat"; t4 says "dog", another
    // wording, and answers nothing.
    let caption = Queries::new(&e, Relevance::Caption, None);
    assert_eq!(caption.t2i, [(0, vec![0, 1]), (2, vec![2])]);
    assert_eq!(
        caption.i2t,
        [(0, vec![0, 1]), (1, vec![0, 1]), (2, vec![2, 3])]
    );
    // At most one query per direction: the first of each list.
    let one = Queries::new(&e, Relevance::Caption, Some(1));
    assert_eq!((one.t2i.len(), one.i2t.len()), (1, 1));
    assert_eq!((one.t2i[0].0, one.i2t[0].0), (0, 0));

    // T2I, item rule: t0 → img1 9500, img0 9000 (2nd); t1 → img1 9405 (1st); t2 → img2 9000
    // (1st); t3 → img2 8820 (1st).   R@1 3/4, R@5 = R@10 = 1.
    // I2T, item rule: img0 → t0 9000 (1st); img1 → t0 9500, t1 9405 (2nd); img2 → t2 9000
    // (1st).   R@1 2/3, R@5 = R@10 = 1.
    let by_item = run(&e, None);
    assert_eq!((by_item.t2i_queries, by_item.i2t_queries), (4, 3));
    assert!(close(by_item.t2i, [0.75, 1.0, 1.0]), "{by_item:?}");
    assert!(close(by_item.i2t, [2.0 / 3.0, 1.0, 1.0]), "{by_item:?}");
    // Caption rule: t0 → img1 answers; t2 → img2. img1 → t0 answers ("a dog" too).
    // R@1 = R@5 = R@10 = 1 both ways.
    let by_caption = run_setting(
        &e,
        Setting {
            relevance: Relevance::Caption,
            ..Setting::default()
        },
    );
    assert_eq!((by_caption.t2i_queries, by_caption.i2t_queries), (2, 3));
    assert!(close(by_caption.t2i, [1.0, 1.0, 1.0]), "{by_caption:?}");
    assert!(close(by_caption.i2t, [1.0, 1.0, 1.0]), "{by_caption:?}");
}

#[test]
fn single_modal_recall_by_hand() {
    let e = encoded(
        Mode::Sparse,
        vec![
            ("a0", sparse(&[("dog", 90), ("red", 10)])),
            ("a1", sparse(&[("dog", 80), ("blue", 10)])),
            ("b0", sparse(&[("cat", 90)])),
            ("b1", sparse(&[("cat", 50), ("dog", 60)])),
            ("c", sparse(&[("car", 90)])),
        ],
        vec![
            ("t0", Some(0), sparse(&[("dog", 100), ("face", 50)])),
            ("t1", Some(1), sparse(&[("dog", 90), ("face", 60)])),
            ("t2", Some(0), sparse(&[("puppy", 100), ("dog", 31)])),
            ("t3", Some(2), sparse(&[("cat", 100), ("face", 50)])),
            ("t4", Some(3), sparse(&[("cat", 90), ("face", 60)])),
            ("t5", Some(3), sparse(&[("kitty", 100), ("cat", 20)])),
            ("t6", Some(4), sparse(&[("car", 100)])),
        ],
    );
    let mut e = e;
    let words = [
        "dog face",
        "Dog  face",
        "a puppy",
        "cat face",
        "cat face",
        "kitty",
        "car",
    ];
    for (t, w) in e.texts.iter_mut().zip(words) {
        t.doc.text = Some(w.to_string());
    }
    assert_eq!(e.image_concepts(&e.wordings()), [0, 0, 1, 1, 2]);
    let tmp = tempfile::tempdir().unwrap();
    let r = evaluate(
        &e,
        Setting::default(),
        100.0,
        true,
        None,
        &tmp.path().join("c"),
        &mut (),
    )
    .unwrap();
    // I2I (the query itself dropped): a0 → a1 7200, b1 5400: 1st. a1 → a0 7200: 1st.
    // b0 → b1 4500: 1st. b1 → a0 5400, a1 4800, b0 4500: 3rd.   R@1 3/4, R@5 = R@10 = 1.
    assert_eq!(r.i2i_queries, Some(4));
    assert!(close(r.i2i.unwrap(), [0.75, 1.0, 1.0]), "{r:?}");
    // T2T (the query and captions worded like it dropped; relevant: the other wordings of its
    // concept): t0 → t2 3100, t4 3000: 1st. t1 → t4 3600, t3 3000, t2 2790: 3rd.
    // t2 → t0 3100: 1st. t3 → t1 3000, t0 2500, t5 2000: 3rd. t4 → t1 3600, t0 3000, t5 1800:
    // 3rd. t5 → t3 2000: 1st.   R@1 3/6, R@5 = R@10 = 1.
    assert_eq!(r.t2t_queries, Some(6));
    assert!(close(r.t2t.unwrap(), [0.5, 1.0, 1.0]), "{r:?}");
    let json = r.to_json();
    assert_eq!(json["i2i.r@1"], 0.75);
    assert_eq!(json["t2t.queries"], 6);
    // Off by default: no single-modal figures.
    let off = run(&e, None);
    assert!(off.i2i.is_none() && off.to_json().get("i2i.r@1").is_none());
}

/// The lexicon figures of `lexlip eval` by hand (`eval::lexicon`). Four images:
///
/// ```text
/// img0 {dog 90, grass 50, x 10}   captions t0 "a dog", t1 "grass"   → "dog" in its top 10: yes
/// img1 {cat 90, sofa 50}          caption  t2 "a kitten"             → no
/// img2 {red 80, street 70, car 30} captions t3 "car", t4 "dog in the street" → yes
/// img3 {w0 20, w1 19, …, w19 1}   caption  t5 "w15"                  → w15 is 16th: no
/// ```
///
/// Non-zeros per image 3, 2, 3, 20: median 3, mean 7. Weight in the top 16 terms: 1 for the
/// first three, (20 + … + 5) / (20 + … + 1) = 200 / 210 for img3; in the top 64: 1 for all.
/// Grounded: 2 of 4 images. Texts: t0 {dog}, t1 {grass}, t2 {kitten, cat}, t3 {car}, t4 {dog,
/// street}, t5 {w15}: non-zeros 1, 1, 2, 1, 2, 1, median 1, mean 8/6.
#[test]
fn lexicon_figures_by_hand() {
    use lexlip_eval::lexicon::{LexiconReport, caption_words};
    let long: Vec<(String, u64)> = (0..20).map(|i| (format!("w{i}"), 20 - i as u64)).collect();
    let long: Vec<(&str, u64)> = long.iter().map(|(t, w)| (t.as_str(), *w)).collect();
    let e = encoded(
        Mode::Sparse,
        three_images()
            .into_iter()
            .chain([("img3", sparse(&long))])
            .collect(),
        three_images_captions(
            sparse(&[("kitten", 100), ("cat", 40)]),
            (Some(3), sparse(&[("w15", 100)])),
        ),
    );
    // Caption words as the tokenizer's pieces give them: stopwords, punctuation and special
    // tokens are not words.
    let pieces = |p: &[&str]| caption_words(p.iter().map(|s| s.to_string()));
    let words = vec![
        pieces(&["[CLS]", "a", "dog", "[SEP]"]),
        pieces(&["grass", "."]),
        pieces(&["a", "kitten"]),
        pieces(&["car"]),
        pieces(&["dog", "in", "the", "street"]),
        pieces(&["w15"]),
    ];
    assert_eq!(words[0].len(), 1);
    assert!(words[4].contains("street") && !words[4].contains("the"));
    let r = LexiconReport::measure(&e, &words).unwrap();
    assert_eq!(r.image.items, 4);
    assert_eq!(r.image.nnz_median, 3.0);
    assert!((r.image.nnz_mean - 7.0).abs() < 1e-12);
    let top16 = (3.0 + 200.0 / 210.0) / 4.0;
    assert!((r.image.top16_weight_share - top16).abs() < 1e-12);
    assert!((r.image.top64_weight_share - 1.0).abs() < 1e-12);
    assert_eq!(r.grounding_images, 4);
    assert!((r.caption_word_in_top10 - 0.5).abs() < 1e-12);
    assert_eq!(r.text.nnz_median, 1.0);
    assert!((r.text.nnz_mean - 8.0 / 6.0).abs() < 1e-12);
    // Every text's own words lead it (t2's "cat" is no word of its caption, and is second).
    assert_eq!(r.text_own_words_first, 1.0);
    let json = r.to_json();
    assert_eq!(json["image"]["nnz_median"], 3.0);
    assert_eq!(json["caption_word_in_top10"], 0.5);
    assert_eq!(json["text_own_words_first"], 1.0);
}

/// A query's own words lead it when one is in the lexicon and no other term outweighs any of
/// them: "a red car" {red 90, car 50, apple 40} yes; {red 90, car 50, apple 50} yes (a tie);
/// {apple 95, red 90, car 50} no (a neighbour first); {apple 95} no (no own word weighs);
/// {red 90, apple 60, car 50} no.
#[test]
fn own_words_first_by_hand() {
    use lexlip_eval::lexicon::{caption_words, own_words_first};
    let words = caption_words(["a", "red", "car"].map(String::from));
    let first = |pairs: &[(&str, u64)]| match sparse(pairs) {
        Vector::Sparse(v) => own_words_first(&v, &words),
        Vector::Dense(_) => unreachable!(),
    };
    assert!(first(&[("red", 90), ("car", 50), ("apple", 40)]));
    assert!(first(&[("red", 90), ("car", 50), ("apple", 50)]));
    assert!(!first(&[("apple", 95), ("red", 90), ("car", 50)]));
    assert!(!first(&[("apple", 95)]));
    assert!(!first(&[("red", 90), ("apple", 60), ("car", 50)]));
}

/// The common-term detector: among 25 images, `card` is in the top 10 of 3 (12 % > 5 %) and
/// listed; `rare` of 1 (4 %) and each image's own term (4 %) are not.
#[test]
fn lexicon_common_terms_by_hand() {
    use lexlip_eval::lexicon::LexiconReport;
    let own: Vec<String> = (0..25).map(|i| format!("u{i}")).collect();
    let images: Vec<(&str, Vector)> = own
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut terms = vec![(t.as_str(), 50)];
            if i < 3 {
                terms.push(("card", 10));
            }
            if i == 7 {
                terms.push(("rare", 10));
            }
            (t.as_str(), sparse(&terms))
        })
        .collect();
    let e = encoded(Mode::Sparse, images, vec![]);
    let r = LexiconReport::measure(&e, &[]).unwrap();
    assert_eq!(r.image.common_top10_terms, vec![("card".to_string(), 0.12)]);
    // No image has a caption: nothing to ground.
    assert_eq!((r.grounding_images, r.caption_word_in_top10), (0, 0.0));
}
