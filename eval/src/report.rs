//! What `lexlip eval` prints: one object for `--json` (keys named plainly, one entry per
//! setting) and a table for people.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::encoded::Encoded;
use lexlip_corpus::Input;

/// The measures of one setting (full vectors, or documents cut to their top K terms).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SettingReport {
    /// None: full vectors.
    pub top_k: Option<usize>,
    /// How the queries searched: "exact", "approx" (sparse: at factor `approx`, with
    /// `term_cut` when one is set) or "hnsw" (the dense index's graph).
    pub search: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approx: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub term_cut: Option<f32>,
    /// Queries searched per direction (fewer than the corpus's with `--max-queries`).
    #[serde(rename = "t2i.queries")]
    pub t2i_queries: usize,
    #[serde(rename = "i2t.queries")]
    pub i2t_queries: usize,
    /// Text → image R@1, R@5, R@10.
    #[serde(skip)]
    pub t2i: [f64; 3],
    /// Image → text R@1, R@5, R@10.
    #[serde(skip)]
    pub i2t: [f64; 3],
    /// Image → image and text → text R@1, R@5, R@10, with their query counts (`--single-modal`).
    #[serde(skip)]
    pub i2i: Option<[f64; 3]>,
    #[serde(skip)]
    pub t2t: Option<[f64; 3]>,
    #[serde(rename = "i2i.queries", skip_serializing_if = "Option::is_none")]
    pub i2i_queries: Option<usize>,
    #[serde(rename = "t2t.queries", skip_serializing_if = "Option::is_none")]
    pub t2t_queries: Option<usize>,
    /// Bytes of the collection on disk per document (image or text).
    pub bytes_per_item: f64,
    /// Bytes per image of a collection of the images alone (an image index's cost), on disk.
    pub bytes_per_image: f64,
    /// Of those, the bytes of the vectors alone (sparse: postings, term dictionary and forward
    /// file of the impacts; dense: the f32 vectors), without stored fields: what LexLIP's
    /// Table 2 compares.
    pub vector_bytes_per_image: f64,
    /// Stored non-zeros (impacts; dense: vector entries) per document.
    pub nnz_per_item: f64,
    pub nnz_per_image: f64,
    pub nnz_per_text: f64,
    /// Queries per second of the search calls alone (both directions, one thread).
    pub qps: f64,
    #[serde(rename = "t2i.qps")]
    pub t2i_qps: f64,
    #[serde(rename = "i2t.qps")]
    pub i2t_qps: f64,
    pub index_bytes: u64,
    /// Seconds to build, commit and load the collection.
    pub index_seconds: f64,
    /// The re-ranked recall of the same queries (with a re-ranker).
    #[serde(skip)]
    pub rerank: Option<RerankReport>,
    /// Of each query's first 10 results under the exact search of the same documents (an
    /// approximate setting: its collection's exact search; a top-K collection searched
    /// exactly: the full vectors'; dense: the exact scan), the share this setting also returns
    /// in its first 10, averaged over the queries: what an approximate search, a graph or a
    /// top-K cut loses against exact search, apart from what the model loses. None on the
    /// first setting.
    #[serde(rename = "t2i.overlap@10", skip_serializing_if = "Option::is_none")]
    pub t2i_overlap: Option<f64>,
    #[serde(rename = "i2t.overlap@10", skip_serializing_if = "Option::is_none")]
    pub i2t_overlap: Option<f64>,
    /// Each query's first results, which the overlaps are computed from (emptied once read).
    #[serde(skip)]
    pub rankings: crate::recall::Rankings,
}

/// Recall after re-ranking the first `top` candidates, and its cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RerankReport {
    pub top: usize,
    pub t2i: [f64; 3],
    pub i2t: [f64; 3],
    /// Milliseconds per query spent in the re-ranker (candidates' states and the fusion pass).
    pub t2i_ms_per_query: f64,
    pub i2t_ms_per_query: f64,
}

impl SettingReport {
    /// "full" or "top-K", and how it was searched when not exactly ("full ×1.2", "full cut
    /// 0.1", "hnsw").
    pub fn label(&self) -> String {
        crate::options::label(self.top_k, self.search, self.approx, self.term_cut)
    }

    /// The JSON object: the recalls under "t2i.r@1" … "i2t.r@10", then the other fields.
    pub fn to_json(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        out.insert("top_k".into(), serde_json::json!(self.top_k));
        let single = [("i2i", self.i2i), ("t2t", self.t2t)]
            .into_iter()
            .filter_map(|(d, r)| r.map(|r| (d, r)));
        for (dir, r) in [("t2i", self.t2i), ("i2t", self.i2t)]
            .into_iter()
            .chain(single)
        {
            for (k, v) in crate::recall::KS.iter().zip(r) {
                out.insert(format!("{dir}.r@{k}"), serde_json::json!(v));
            }
        }
        if let Some(r) = &self.rerank {
            out.insert("rerank.top".into(), serde_json::json!(r.top));
            for (dir, v) in [("t2i", r.t2i), ("i2t", r.i2t)] {
                for (k, v) in crate::recall::KS.iter().zip(v) {
                    out.insert(format!("rerank.{dir}.r@{k}"), serde_json::json!(v));
                }
            }
            out.insert(
                "rerank.t2i.ms_per_query".into(),
                serde_json::json!(r.t2i_ms_per_query),
            );
            out.insert(
                "rerank.i2t.ms_per_query".into(),
                serde_json::json!(r.i2t_ms_per_query),
            );
        }
        if let Ok(serde_json::Value::Object(rest)) = serde_json::to_value(self) {
            out.extend(rest);
        }
        serde_json::Value::Object(out)
    }
}

/// The whole evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalReport {
    pub model: String,
    pub corpus: String,
    pub mode: &'static str,
    /// Images and texts evaluated (encoded, and for texts, with their image unless they have
    /// none).
    pub images: usize,
    pub captions: usize,
    /// The queries of each direction under the relevance rule (each wording once under the
    /// caption rule), before `--max-queries` (each setting says how many it searched).
    pub t2i_queries: usize,
    pub i2t_queries: usize,
    /// What answered a query.
    pub relevance: crate::options::Relevance,
    /// The exponent of the sparse queries' IDF weighting, when they were weighted (`--idf`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idf: Option<f32>,
    /// Pictures and captions searched beside the corpus's, answering nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distractors: Option<crate::encoded::Distractors>,
    pub read: u64,
    pub skipped: BTreeMap<String, u64>,
    #[serde(skip)]
    pub settings: Vec<SettingReport>,
    /// Reading, decoding and encoding every item once.
    pub encode_seconds: f64,
    pub seconds: f64,
    /// How readable the lexicons are (sparse mode).
    #[serde(skip)]
    pub lexicon: Option<crate::lexicon::LexiconReport>,
}

impl EvalReport {
    pub fn new(
        model: String,
        corpus: String,
        encoded: &Encoded,
        relevance: crate::options::Relevance,
        (t2i_queries, i2t_queries): (usize, usize),
        settings: Vec<SettingReport>,
        seconds: f64,
    ) -> Self {
        let distractors = encoded.distractors.clone();
        Self {
            model,
            corpus,
            mode: encoded.mode.as_str(),
            images: encoded.images.len() - distractors.as_ref().map_or(0, |d| d.images),
            captions: encoded.texts.len() - distractors.as_ref().map_or(0, |d| d.captions),
            distractors,
            t2i_queries,
            i2t_queries,
            relevance,
            idf: None,
            read: encoded.read,
            skipped: encoded.skipped.clone(),
            settings,
            encode_seconds: encoded.encode_seconds,
            seconds,
            lexicon: None,
        }
    }

    /// `--json`: `{"model", "corpus", "images", "captions", "settings": [...], ...}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut out = match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        out.insert(
            "settings".into(),
            self.settings.iter().map(SettingReport::to_json).collect(),
        );
        if let Some(l) = &self.lexicon {
            out.insert("lexicon".into(), l.to_json());
        }
        serde_json::Value::Object(out)
    }

    /// A table for people.
    pub fn human(&self) -> String {
        let skipped: u64 = self.skipped.values().sum();
        let mut out = format!(
            "model {} ({} mode)\ncorpus {}: {} images, {} captions ({} text→image and {} image→text \
             queries, answered by {}); {} items read, {skipped} skipped {:?}; encoded in {:.2} s\n\n",
            self.model,
            self.mode,
            self.corpus,
            self.images,
            self.captions,
            self.t2i_queries,
            self.i2t_queries,
            match self.relevance {
                crate::options::Relevance::Caption => "any item of the same caption",
                crate::options::Relevance::Item => "their own items",
                crate::options::Relevance::Picture => "their own items or identical pictures",
            },
            self.read,
            self.skipped,
            self.encode_seconds,
        );
        if let Some(a) = self.idf {
            out.push_str(&format!(
                "queries weighted by their terms' IDF in the collection searched, to the power {a}\n\n"
            ));
        }
        if let Some(d) = &self.distractors {
            out.push_str(&format!(
                "distractors {}: {} images, {} captions searched beside them, answering nothing \
                 (read in {:.2} s)\n\n",
                d.collection, d.images, d.captions, d.read_seconds
            ));
        }
        out.push_str(&format!(
            "{:<12} {:>7} {:>7} {:>7}   {:>7} {:>7} {:>7}   {:>10} {:>8} {:>8} {:>8} {:>9}\n",
            "setting",
            "T2I R@1",
            "R@5",
            "R@10",
            "I2T R@1",
            "R@5",
            "R@10",
            "bytes/item",
            "nnz/item",
            "nnz/img",
            "nnz/txt",
            "QPS"
        ));
        for s in &self.settings {
            let pct = |x: f64| format!("{:.1}", 100.0 * x);
            out.push_str(&format!(
                "{:<12} {:>7} {:>7} {:>7}   {:>7} {:>7} {:>7}   {:>10.0} {:>8.1} {:>8.1} {:>8.1} {:>9.0}\n",
                s.label(),
                pct(s.t2i[0]),
                pct(s.t2i[1]),
                pct(s.t2i[2]),
                pct(s.i2t[0]),
                pct(s.i2t[1]),
                pct(s.i2t[2]),
                s.bytes_per_item,
                s.nnz_per_item,
                s.nnz_per_image,
                s.nnz_per_text,
                s.qps
            ));
        }
        for s in &self.settings {
            if let (Some(i2i), Some(t2t)) = (s.i2i, s.t2t) {
                let pct = |r: [f64; 3]| r.map(|x| format!("{:.1}", 100.0 * x)).join(" / ");
                out.push_str(&format!(
                    "{:<8} I2I R@1/5/10 {} ({} queries)   T2T R@1/5/10 {} ({} queries)\n",
                    s.label(),
                    pct(i2i),
                    s.i2i_queries.unwrap_or(0),
                    pct(t2t),
                    s.t2t_queries.unwrap_or(0),
                ));
            }
        }
        for s in &self.settings {
            if let (Some(t2i), Some(i2t)) = (s.t2i_overlap, s.i2t_overlap) {
                out.push_str(&format!(
                    "{:<12} finds {:.1} % of the exact top 10 (T2I), {:.1} % (I2T)\n",
                    s.label(),
                    100.0 * t2i,
                    100.0 * i2t,
                ));
            }
        }
        for s in &self.settings {
            if let Some(r) = &s.rerank {
                let pct = |r: [f64; 3]| r.map(|x| format!("{:.1}", 100.0 * x)).join(" / ");
                out.push_str(&format!(
                    "{:<8} re-ranked top-{}: T2I R@1/5/10 {} ({:.1} ms/query)   I2T R@1/5/10 {} \
                     ({:.1} ms/query)\n",
                    s.label(),
                    r.top,
                    pct(r.t2i),
                    r.t2i_ms_per_query,
                    pct(r.i2t),
                    r.i2t_ms_per_query,
                ));
            }
        }
        if let Some(l) = &self.lexicon {
            out.push('\n');
            out.push_str(&l.human());
        }
        out.push_str(
            "\nrecall in %; QPS of the search calls alone (queries encoded beforehand, one thread)",
        );
        out
    }
}

/// How a report names its corpus: the input's path (or its shards' paths, space-separated).
pub fn corpus_name(input: &Input) -> String {
    match input {
        Input::Tsv { path, .. } | Input::Manifest(path) | Input::ImageDir(path) => {
            path.display().to_string()
        }
        Input::WebDataset(paths) => paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" "),
    }
}
