//! Unit tests of the evaluation's documents and settings (`lib.rs`).

use super::*;
use crate::encoded::{IMAGE_ID, lean};
use lexlip_proto::{DocId, Document, TermSpace};

#[test]
fn lean_documents_keep_their_image_id_alone() {
    let mut doc = Document::new(
        lexlip_proto::DocId::new("t0").unwrap(),
        lexlip_proto::Modality::Text,
    );
    doc.text = Some("a red dog".into());
    doc.metadata.insert(IMAGE_ID.into(), "im0".into());
    doc.metadata
        .insert("objects".into(), serde_json::json!([{"label": "dog"}]));
    let lean = lean(doc.clone());
    assert_eq!(lean.metadata.len(), 1);
    assert_eq!(lean.metadata[IMAGE_ID], "im0");
    assert_eq!((lean.id, lean.text), (doc.id, doc.text));
}

/// A one-term item of `modality`, linked to picture `image` when given.
fn entry(id: &str, modality: lexlip_proto::Modality, image: Option<&str>) -> Entry {
    let mut doc = Document::new(DocId::new(id).unwrap(), modality);
    doc.text = Some(format!("text of {id}"));
    if let Some(image) = image {
        doc.metadata.insert(IMAGE_ID.into(), image.into());
    }
    let q = lexlip_proto::QuantizedVector::new([("dog".to_string(), 7)]).unwrap();
    Entry {
        doc,
        vector: Vector::Sparse(Impacts::new(&q, &mut Interner::default())),
        query: None,
        pixels: None,
        picture: None,
    }
}

/// Under the picture rule, pictures of one file answer for each other and for each other's
/// captions; a picture of its own file, or read back without one, answers only for itself.
#[test]
fn identical_pictures_answer_for_each_other() {
    use lexlip_proto::Modality::{Image, Text};
    let mut corpus = Encoded::new(Mode::Sparse, TermSpace::free("test"), None);
    let picture = |id: &str, hash: Option<u64>| Entry {
        picture: hash,
        ..entry(id, Image, None)
    };
    // France and Clipperton Island share a file; Norway has its own; im3 was read back.
    corpus.images = vec![
        picture("france", Some(7)),
        picture("clipperton", Some(7)),
        picture("norway", Some(9)),
        picture("im3", None),
    ];
    corpus.texts = ["france", "clipperton", "norway", "im3"]
        .iter()
        .map(|&i| entry(&format!("t-{i}"), Text, Some(i)))
        .collect();
    corpus.text_image = vec![Some(0), Some(1), Some(2), Some(3)];
    let q = Queries::new(&corpus, Relevance::Picture, None);
    assert_eq!(
        q.t2i,
        vec![(0, vec![0, 1]), (1, vec![0, 1]), (2, vec![2]), (3, vec![3])]
    );
    assert_eq!(
        q.i2t,
        vec![(0, vec![0, 1]), (1, vec![0, 1]), (2, vec![2]), (3, vec![3])]
    );
    // The item rule ignores the files.
    let item = Queries::new(&corpus, Relevance::Item, None);
    assert_eq!(item.t2i[0], (0, vec![0]));
    assert_eq!(item.i2t[1], (1, vec![1]));
    // At most two queries a side, spread as the item rule spreads them.
    let few = Queries::new(&corpus, Relevance::Picture, Some(2));
    assert_eq!(few.t2i, vec![(0, vec![0, 1]), (2, vec![2])]);
}

/// Distractors join both sides after the corpus, renamed and unlinked: the queries and
/// their answers stay the corpus's, under either relevance rule.
#[test]
fn distractors_are_neither_asked_nor_answers() {
    use lexlip_proto::Modality::{Image, Text};
    let space = TermSpace::free("test");
    let mut corpus = Encoded::new(Mode::Sparse, space.clone(), None);
    corpus.images = vec![entry("im0", Image, None), entry("im1", Image, None)];
    corpus.texts = vec![
        entry("t0", Text, Some("im0")),
        entry("t1", Text, Some("im1")),
    ];
    corpus.text_image = vec![Some(0), Some(1)];
    let mut others = Encoded::new(Mode::Sparse, space.clone(), None);
    // The same ids and wordings as the corpus's, linked among themselves.
    others.images = vec![entry("im0", Image, None)];
    others.texts = vec![entry("t0", Text, Some("im0")), entry("x", Text, None)];
    others.text_image = vec![Some(0), None];
    others.encode_seconds = 2.0;
    let before: Vec<Queries> = [Relevance::Item, Relevance::Caption, Relevance::Picture]
        .map(|r| Queries::new(&corpus, r, None))
        .into();
    corpus
        .add_distractors(others.clone(), "c1m".into())
        .unwrap();
    assert_eq!(corpus.images.len(), 3);
    assert_eq!(corpus.texts.len(), 4);
    assert_eq!(corpus.text_image, [Some(0), Some(1), None, None]);
    assert_eq!(corpus.images[2].doc.id.as_str(), "distractor/im0");
    assert_eq!(corpus.texts[2].doc.id.as_str(), "distractor/t0");
    assert!(corpus.texts[2].doc.metadata.is_empty());
    assert_eq!(corpus.texts[2].doc.text.as_deref(), Some("text of t0"));
    assert_eq!(corpus.texts[2].vector, others.texts[0].vector);
    let after: Vec<Queries> = [Relevance::Item, Relevance::Caption, Relevance::Picture]
        .map(|r| Queries::new(&corpus, r, None))
        .into();
    assert_eq!(after, before);
    assert_eq!(
        corpus.distractors,
        Some(Distractors {
            collection: "c1m".into(),
            images: 1,
            captions: 2,
            read_seconds: 2.0,
        })
    );
    // Another term space is refused, and changes nothing.
    let mut stranger = Encoded::new(Mode::Sparse, TermSpace::free("other"), None);
    stranger.images = vec![entry("im9", Image, None)];
    let err = corpus.add_distractors(stranger, "x".into()).unwrap_err();
    assert!(err.to_string().contains("same model"), "{err}");
    assert_eq!((corpus.images.len(), corpus.texts.len()), (3, 4));
    assert_eq!(corpus.distractors.unwrap().collection, "c1m");
}

#[test]
fn settings_put_full_first_then_each_k_once() {
    let o = EvalOptions {
        top_ks: vec![8, 64, 16, 8, 32],
        ..EvalOptions::default()
    };
    let ks: Vec<Option<usize>> = o.settings().unwrap().iter().map(|s| s.top_k).collect();
    assert_eq!(ks, [None, Some(64), Some(32), Some(16), Some(8)]);
    assert_eq!(
        EvalOptions::default().settings().unwrap(),
        [Setting::default()]
    );
    let zero = EvalOptions {
        top_ks: vec![0],
        ..EvalOptions::default()
    };
    assert!(zero.settings().is_err());
    let dense = EvalOptions {
        mode: Mode::Dense,
        top_ks: vec![8],
        ..EvalOptions::default()
    };
    assert!(dense.settings().unwrap_err().to_string().contains("dense"));
}

/// Full exact first, then factors (smallest first, once), term cuts, then each top-K
/// exact, at each factor and with each cut; the dense graph last; knobs of the other mode
/// and out-of-range values refused.
#[test]
fn approximate_settings_follow_the_exact_one() {
    let o = EvalOptions {
        approx: vec![1.5, 1.2, 1.5],
        term_cuts: vec![0.1],
        top_ks: vec![64],
        ..EvalOptions::default()
    };
    let got: Vec<(&str, Option<f32>, f32, Option<usize>)> = o
        .settings()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s.search(Mode::Sparse),
                s.factor(Mode::Sparse),
                s.term_cut,
                s.top_k,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("exact", None, 0.0, None),
            ("approx", Some(1.2), 0.0, None),
            ("approx", Some(1.5), 0.0, None),
            ("approx", Some(1.0), 0.1, None),
            ("exact", None, 0.0, Some(64)),
            ("approx", Some(1.2), 0.0, Some(64)),
            ("approx", Some(1.5), 0.0, Some(64)),
            ("approx", Some(1.0), 0.1, Some(64)),
        ]
    );
    let dense = EvalOptions {
        mode: Mode::Dense,
        hnsw: true,
        ..EvalOptions::default()
    };
    let searches: Vec<&str> = dense
        .settings()
        .unwrap()
        .iter()
        .map(|s| s.search(Mode::Dense))
        .collect();
    assert_eq!(searches, ["exact", "hnsw"]);
    for bad in [
        EvalOptions {
            approx: vec![1.0],
            ..EvalOptions::default()
        },
        EvalOptions {
            term_cuts: vec![1.0],
            ..EvalOptions::default()
        },
        EvalOptions {
            hnsw: true,
            ..EvalOptions::default()
        },
        EvalOptions {
            mode: Mode::Dense,
            approx: vec![1.2],
            ..EvalOptions::default()
        },
    ] {
        assert!(
            bad.settings().is_err(),
            "{:?}",
            (bad.mode, bad.approx, bad.term_cuts, bad.hnsw)
        );
    }
}
