//! The corpus encoded once: every item's document and vector, in memory between the encoders
//! and the collections each setting builds.

use std::collections::{BTreeMap, HashMap};

use lexlip_pipeline::{PipelineError, Result};
use lexlip_proto::{DenseVector, DocId, Document, TermSpace};

use crate::impacts::Impacts;
use crate::options::Mode;

/// An item's vector, kept in memory between the encoders and the collections.
#[derive(Debug, Clone, PartialEq)]
pub enum Vector {
    /// Lexicon impacts quantized with the evaluation's scale, uncut (each setting cuts them
    /// with its collection's quantizer).
    Sparse(Impacts),
    Dense(DenseVector),
}

impl Vector {
    /// Non-zero entries.
    pub fn nnz(&self) -> usize {
        match self {
            Vector::Sparse(q) => q.len(),
            Vector::Dense(d) => d.as_slice().iter().filter(|x| **x != 0.0).count(),
        }
    }
}

/// One encoded item: the document a collection stores (as `lexlip index` stores it) and its
/// vector.
#[derive(Debug, Clone)]
pub struct Entry {
    pub doc: Document,
    /// The vector as stored (a document).
    pub vector: Vector,
    /// A text's vector as a query, where the model encodes queries otherwise than the
    /// documents it stores (expansion control: `TextTerms::for_documents`); `None`: the same.
    pub query: Option<Vector>,
    /// The image as the encoder saw it, kept for a re-ranker (`EvalOptions::rerank`) only.
    pub pixels: Option<lexlip_model::PreprocessedImage>,
    /// A hash of a picture's file, read from a corpus: pictures in identical files answer for
    /// each other under [`crate::options::Relevance::Picture`]. `None` for texts and for
    /// pictures read back from a collection.
    pub picture: Option<u64>,
}

impl Entry {
    /// The vector this item searches with.
    pub fn as_query(&self) -> &Vector {
        self.query.as_ref().unwrap_or(&self.vector)
    }
}

/// `doc` with only the metadata an evaluation reads: `image_id`, which links a caption to its
/// picture. Its collections filter by modality alone, and the rest (a composed picture's placed
/// objects, a shard's url) took more memory than the vectors: about 4 GB at a million pictures.
pub(crate) fn lean(mut doc: Document) -> Document {
    doc.metadata.retain(|key, _| key == IMAGE_ID);
    doc
}

/// The metadata key that links a caption to its picture, as the corpus readers set it.
pub(crate) const IMAGE_ID: &str = "image_id";

/// Every item of the corpus, encoded once.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub mode: Mode,
    pub images: Vec<Entry>,
    /// Captions and other texts.
    pub texts: Vec<Entry>,
    /// For each text, the position in `images` of its image (None: a text of no image, which
    /// is a candidate for image → text queries but no query itself).
    pub text_image: Vec<Option<usize>>,
    /// The term space of the sparse collections (free for dense).
    pub term_space: TermSpace,
    /// Its tokens, which sparse collections are bound to.
    pub tokens: Option<Vec<String>>,
    /// Items read from the input (good and bad).
    pub read: u64,
    /// Skipped items by reason.
    pub skipped: BTreeMap<String, u64>,
    /// Seconds spent reading, decoding and encoding.
    pub encode_seconds: f64,
    /// The distractors added at the end of `images` and `texts` ([`Encoded::add_distractors`]).
    pub distractors: Option<Distractors>,
}

/// Where an evaluation's distractors came from, and how many joined each side.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Distractors {
    pub collection: String,
    pub images: usize,
    pub captions: usize,
    /// Seconds spent reading them back.
    pub read_seconds: f64,
}

/// What a distractor's id starts with, so that it never takes the id of a test item.
pub const DISTRACTOR_PREFIX: &str = "distractor/";

impl Encoded {
    /// Nothing read yet, for `mode`'s collections over `term_space` (bound to `tokens`).
    pub fn new(mode: Mode, term_space: TermSpace, tokens: Option<Vec<String>>) -> Self {
        Self {
            mode,
            images: Vec::new(),
            texts: Vec::new(),
            text_image: Vec::new(),
            term_space,
            tokens,
            read: 0,
            skipped: BTreeMap::new(),
            encode_seconds: 0.0,
            distractors: None,
        }
    }

    /// Adds the pictures and texts of `other` (read from the collection `name`) as
    /// distractors: documents of every search, after this corpus's, that answer no query and
    /// ask none. They lose their links and metadata, and their ids take [`DISTRACTOR_PREFIX`].
    pub fn add_distractors(&mut self, other: Encoded, name: String) -> Result<()> {
        if self.mode != other.mode || self.term_space != other.term_space {
            return Err(PipelineError::Input(format!(
                "the distractors at {name} were not encoded like the test corpus ({} mode, term \
                 space {:?}): index them with the same model",
                self.mode.as_str(),
                self.term_space
            )));
        }
        let dim = |e: Option<&Entry>| match e.map(|e| &e.vector) {
            Some(Vector::Dense(d)) => Some(d.dim()),
            _ => None,
        };
        let (ours, theirs) = (dim(self.images.first()), dim(other.images.first()));
        if let (Some(a), Some(b)) = (ours, theirs)
            && a != b
        {
            return Err(PipelineError::Input(format!(
                "the distractors at {name} hold dense vectors of {b} dimensions, the model's \
                 have {a}: index them with the same model"
            )));
        }
        let rename = |entry: Entry| -> Result<Entry> {
            let id = DocId::new(format!("{DISTRACTOR_PREFIX}{}", entry.doc.id))
                .map_err(|e| PipelineError::Input(format!("a distractor's id: {e}")))?;
            let mut doc = Document::new(id, entry.doc.modality);
            doc.text = entry.doc.text;
            Ok(Entry {
                doc,
                vector: entry.vector,
                query: None,
                pixels: None,
                picture: None,
            })
        };
        let counts = Distractors {
            collection: name,
            images: other.images.len(),
            captions: other.texts.len(),
            read_seconds: other.encode_seconds,
        };
        self.images.reserve(counts.images);
        for entry in other.images {
            self.images.push(rename(entry)?);
        }
        self.texts.reserve(counts.captions);
        self.text_image.reserve(counts.captions);
        for entry in other.texts {
            self.texts.push(rename(entry)?);
            self.text_image.push(None);
        }
        self.distractors = Some(counts);
        Ok(())
    }

    /// The image → text queries: each image with at least one caption, and its captions.
    pub fn captions_of_images(&self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); self.images.len()];
        for (t, image) in self.text_image.iter().enumerate() {
            if let Some(i) = image {
                out[*i].push(t);
            }
        }
        out
    }

    /// Text → image queries (captions with an image).
    pub fn t2i_queries(&self) -> usize {
        self.text_image.iter().flatten().count()
    }

    /// Image → text queries (images with a caption).
    pub fn i2t_queries(&self) -> usize {
        self.captions_of_images()
            .iter()
            .filter(|c| !c.is_empty())
            .count()
    }

    /// The concept of each image (numbered from 0): images linked by a shared caption wording
    /// (`wording[t]` of text `t`, from [`Encoded::wordings`]), transitively.
    pub fn image_concepts(&self, wording: &[String]) -> Vec<usize> {
        let mut parent: Vec<usize> = (0..self.images.len()).collect();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while parent[i] != i {
                parent[i] = parent[parent[i]];
                i = parent[i];
            }
            i
        }
        let mut first_with: HashMap<&str, usize> = HashMap::new();
        for (t, image) in self.text_image.iter().enumerate() {
            let Some(i) = *image else { continue };
            let j = *first_with.entry(wording[t].as_str()).or_insert(i);
            let (a, b) = (root(&mut parent, i), root(&mut parent, j));
            parent[a.max(b)] = a.min(b);
        }
        let mut ids: HashMap<usize, usize> = HashMap::new();
        (0..self.images.len())
            .map(|i| {
                let r = root(&mut parent, i);
                let next = ids.len();
                *ids.entry(r).or_insert(next)
            })
            .collect()
    }

    /// Every text lower-cased with runs of white space made one space (how concepts compare).
    pub fn wordings(&self) -> Vec<String> {
        self.texts
            .iter()
            .map(|e| {
                let text = e.doc.text.as_deref().unwrap_or_default();
                text.split_whitespace()
                    .map(str::to_lowercase)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    /// Fails when nothing can be evaluated: no image-caption pair survived.
    pub fn check(&self) -> Result<()> {
        if self.t2i_queries() == 0 {
            let skipped: u64 = self.skipped.values().sum();
            return Err(PipelineError::Input(format!(
                "nothing to evaluate: {} items read, {} images and {} texts encoded, no caption \
                 of an encoded image ({skipped} skipped: {:?})",
                self.read,
                self.images.len(),
                self.texts.len(),
                self.skipped
            )));
        }
        Ok(())
    }
}
