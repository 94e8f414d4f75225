//! The evaluation's engine half on hand-made vectors: real collections (tantivy) per setting,
//! searched like the server searches, with recalls, non-zeros and the effect of the top-K cut
//! worked out by hand in the comments.

use std::collections::BTreeMap;

use lexlip_pipeline::eval::{Encoded, Entry, Mode, SettingReport, Vector, evaluate};
use lexlip_proto::{DenseVector, DocId, Document, Modality, QuantizedVector, TermSpace};

fn entry(id: &str, modality: Modality, image: Option<&str>, vector: Vector) -> Entry {
    let mut doc = Document::new(DocId::new(id).unwrap(), modality);
    if let Some(i) = image {
        doc.metadata.insert("image_id".into(), i.into());
    }
    Entry { doc, vector }
}

fn sparse(pairs: &[(&str, u64)]) -> Vector {
    Vector::Sparse(QuantizedVector::new(pairs.iter().copied()).unwrap())
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
    }
}

fn run(e: &Encoded, top_k: Option<usize>) -> SettingReport {
    let tmp = tempfile::tempdir().unwrap();
    evaluate(e, top_k, 100.0, &tmp.path().join("c"), &mut ()).unwrap()
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
        vec![
            ("img0", sparse(&[("dog", 90), ("grass", 50), ("x", 10)])),
            ("img1", sparse(&[("cat", 90), ("sofa", 50)])),
            ("img2", sparse(&[("red", 80), ("street", 70), ("car", 30)])),
        ],
        vec![
            ("t0", Some(0), sparse(&[("dog", 100)])),
            ("t1", Some(0), sparse(&[("grass", 100)])),
            ("t2", Some(1), sparse(&[("sofa", 100), ("dog", 10)])),
            ("t3", Some(2), sparse(&[("car", 100)])),
            ("t4", Some(2), sparse(&[("dog", 99), ("street", 50)])),
            ("t5", None, sparse(&[("red", 100), ("car", 90)])),
        ],
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
}
