//! The seed papers' training options.
//!
//! GRIT-VLP's grouped sampler (`--sampler grouped`): every epoch's order is a permutation of
//! the pairs, deterministic for a seed; the pairs an epoch leaves out lead the next one; on
//! clustered representations the grouped mini-batches hold much harder negatives than random
//! ones; and a grouped run resumes bit for bit, mid-epoch and at an epoch's end.
//!
//! COOKIE's single-modal losses (`--image-contrastive`, `--text-contrastive`) train and resume
//! bit for bit. (Their values and gradients against PyTorch: `losses_vs_torch.rs`; against
//! finite differences: `gradients.rs`.)

use std::collections::HashSet;

use lexlip_train::data::Order;
use lexlip_train::rng::Rng;
use lexlip_train::sampler::{Collected, GroupState, SparseRow, grouped_order};
use lexlip_train::{Sampler, TrainOptions};
use proptest::prelude::*;

mod common;
use common::*;

/// Random sparse representations: `terms` entries of ids below `vocab`.
fn random_row(rng: &mut Rng, vocab: usize, terms: usize) -> SparseRow {
    let mut dense = vec![0f32; vocab];
    for _ in 0..terms {
        dense[rng.below(vocab)] = rng.uniform_f32() + 0.01;
    }
    SparseRow::strongest(&dense, 64)
}

/// The pairs an epoch of `order` trains, with random representations, in training order.
fn collect_epoch(order: &mut Order, epoch: u64, batch: usize, rng: &mut Rng) -> Vec<Collected> {
    let steps_per_epoch = order.steps_per_epoch();
    (epoch * steps_per_epoch..(epoch + 1) * steps_per_epoch)
        .flat_map(|s| order.batch(s))
        .take(steps_per_epoch as usize * batch)
        .map(|p| Collected {
            pair: p as u32,
            image: random_row(rng, 50, 6),
            text: random_row(rng, 50, 4),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Over several epochs: each order is a permutation of all pairs, the same for the same
    /// seed, and a pair left out of one epoch (the `pairs mod batch` tail) is trained in the
    /// next one's first mini-batch.
    #[test]
    fn every_epoch_is_a_permutation_and_no_pair_sits_out_twice(
        pairs in 2usize..300,
        batch_frac in 0.0f64..1.0,
        space_mult in 1usize..5,
        seed in any::<u64>(),
    ) {
        let batch = 2 + ((pairs.min(40) - 2) as f64 * batch_frac) as usize;
        let space = batch * space_mult + (seed % 3) as usize;
        let mut order = Order::new(seed, pairs, batch);
        let steps_per_epoch = order.steps_per_epoch() as usize;
        let mut rng = Rng::new(&[seed, 1]);
        let mut left_out: HashSet<usize> = HashSet::new();
        for epoch in 0..4u64 {
            let all: Vec<usize> = (0..steps_per_epoch as u64)
                .flat_map(|s| order.batch(epoch * steps_per_epoch as u64 + s))
                .collect();
            let trained: HashSet<usize> = all.iter().copied().collect();
            prop_assert_eq!(trained.len(), steps_per_epoch * batch, "a pair twice in one epoch");
            prop_assert!(left_out.is_subset(&trained), "left out two epochs in a row");
            if epoch > 0 && !left_out.is_empty() {
                let first: HashSet<usize> = order.batch(epoch * steps_per_epoch as u64).into_iter().collect();
                prop_assert!(left_out.is_subset(&first));
            }
            left_out = (0..pairs).filter(|p| !trained.contains(p)).collect();
            let collected = collect_epoch(&mut order, epoch, batch, &mut rng);
            let next = grouped_order(&collected, pairs, batch, space, &mut Rng::new(&[seed, epoch]))
                .unwrap();
            let again = grouped_order(&collected, pairs, batch, space, &mut Rng::new(&[seed, epoch]))
                .unwrap();
            prop_assert_eq!(&next, &again, "not deterministic");
            let mut sorted = next.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..pairs as u32).collect::<Vec<_>>());
            order.set(epoch + 1, &next);
        }
    }
}

/// Representations in 8 tight clusters of 16 pairs: random mini-batches of 16 mix the
/// clusters; grouped ones are (almost) single clusters, so their negatives are much harder.
#[test]
fn grouping_makes_negatives_harder_on_clustered_pairs() {
    let (pairs, batch) = (128usize, 16usize);
    let mut order = Order::new(5, pairs, batch);
    let mut rng = Rng::new(&[9]);
    let cluster = |p: usize| (p * 7) % 8; // clusters spread over the pair ids
    let row = |c: usize, rng: &mut Rng| {
        let mut dense = vec![0f32; 64];
        dense[c] = 1.0 + rng.uniform_f32() * 0.1;
        dense[8 + rng.below(56)] = 0.05;
        SparseRow::strongest(&dense, 64)
    };
    let collected: Vec<Collected> = (0..order.steps_per_epoch())
        .flat_map(|s| order.batch(s))
        .map(|p| Collected {
            pair: p as u32,
            image: row(cluster(p), &mut rng),
            text: row(cluster(p), &mut rng),
        })
        .collect();
    let mut state = GroupState {
        current: None,
        collected,
    };
    let regrouped = state.next_epoch(0, 5, pairs, batch, 128).unwrap();
    assert!(state.collected.is_empty());
    assert_eq!(state.current.as_ref().map(|c| c.0), Some(1));
    assert!(
        regrouped.after > 3.0 * regrouped.before && regrouped.after > 0.8,
        "before {} after {}",
        regrouped.before,
        regrouped.after
    );
    let pure = regrouped
        .order
        .chunks(batch)
        .filter(|b| {
            b.iter()
                .all(|&p| cluster(p as usize) == cluster(b[0] as usize))
        })
        .count();
    assert!(pure >= 6, "{pure} of 8 mini-batches hold one cluster");
}

/// The sampler's state survives a checkpoint's tensors unchanged.
#[test]
fn group_state_round_trips_through_tensors() {
    let mut rng = Rng::new(&[2]);
    let state = GroupState {
        current: Some((3, vec![4, 0, 2, 1, 3])),
        collected: (0..5u32)
            .map(|p| Collected {
                pair: p,
                image: random_row(&mut rng, 500, 80),
                text: random_row(&mut rng, 500, 3),
            })
            .collect(),
    };
    let tensors = state.tensors().unwrap().into_iter().collect();
    let back = GroupState::from_tensors(&tensors).unwrap();
    assert_eq!(back.current, state.current);
    assert_eq!(back.collected, state.collected);
    assert_eq!(
        back.collected[0].image.ids.len(),
        64,
        "the strongest 64 kept"
    );
}

fn grouped_options(tsv: &std::path::Path, out: &std::path::Path) -> TrainOptions {
    let mut o = resume_options(tsv, out);
    o.optim.sampler = Sampler::Grouped;
    o.optim.group_size = 16;
    o.method.itc_consistency = 0.2;
    o.optim.steps = Some(12); // 3 epochs of 4 steps (32 pairs, batch 8)
    o
}

/// A grouped run regroups at each epoch's end (and says so), trains other batches than a
/// random one, and resumes bit for bit from a checkpoint mid-epoch and at an epoch's end.
#[test]
fn grouped_training_regroups_and_resumes_bitwise() {
    let (tmp, tsv) = corpus();
    let whole = tmp.path().join("whole");
    let (s, seen) = run_collecting(&grouped_options(&tsv, &whole));
    assert_eq!(s.steps_done, 12);
    let regroups: Vec<&String> = seen
        .messages
        .iter()
        .filter(|m| m.starts_with("grouped sampler"))
        .collect();
    assert_eq!(regroups.len(), 2, "{:?}", seen.messages);
    assert!(
        seen.logs
            .iter()
            .all(|l| l.parts.contains_key("itc_consistency"))
    );
    let train_json = train_json(&whole);
    assert_eq!(train_json["options"]["sampler"], "grouped");

    let mut random = grouped_options(&tsv, &tmp.path().join("random"));
    random.optim.sampler = Sampler::Random;
    run_quietly(&random);
    assert_ne!(model_bytes(&whole), model_bytes(&random.run.out));

    for (name, stop) in [("mid", 6), ("boundary", 8)] {
        let parts = tmp.path().join(name);
        train_stopped_and_resumed(&grouped_options(&tsv, &parts), stop, "lexlip.json");
        assert_eq!(
            model_bytes(&whole),
            model_bytes(&parts),
            "stopped at {stop}"
        );
    }
}

/// Both of COOKIE's single-modal losses show in the log, change what is trained, and resume
/// bit for bit (the second image views are drawn from their own stream, keyed by the step).
#[test]
fn single_modal_losses_train_and_resume_bitwise() {
    let (tmp, tsv) = corpus();
    let cookie = |out: &std::path::Path| {
        let mut o = resume_options(&tsv, out);
        o.method.image_contrastive = 0.5;
        o.method.text_contrastive = 0.5;
        o
    };
    let whole = tmp.path().join("whole");
    let (_, seen) = run_collecting(&cookie(&whole));
    assert!(seen.logs.iter().all(|l| {
        l.parts.contains_key("image_contrastive") && l.parts.contains_key("text_contrastive")
    }));
    let plain = tmp.path().join("plain");
    run_quietly(&resume_options(&tsv, &plain));
    assert_ne!(model_bytes(&whole), model_bytes(&plain));
    let parts = tmp.path().join("parts");
    train_stopped_and_resumed(&cookie(&parts), 3, "lexlip.json");
    assert_eq!(model_bytes(&whole), model_bytes(&parts));
}

#[test]
fn bad_sampler_options_are_clear_errors() {
    let (tmp, tsv) = corpus();
    let mut o = grouped_options(&tsv, &tmp.path().join("out"));
    o.optim.group_size = 4;
    assert!(err_of(&o).contains("--group-size 4 must be at least --batch-size 8"));
    let mut o = grouped_options(&tsv, &tmp.path().join("out"));
    o.method.itc_consistency = -1.0;
    assert!(err_of(&o).contains("--itc-consistency must be >= 0"));
    o.method.itc_consistency = 0.2;
    o.method.phase = 2;
    assert!(err_of(&o).contains("phase 2 contrasts against queues"));
    o.method.phase = 1;
    o.method.itc_consistency = 0.0;
    o.method.image_contrastive = f64::NAN;
    assert!(err_of(&o).contains("--image-contrastive must be >= 0"));
    o.method.image_contrastive = 0.0;
    o.method.text_contrastive = 0.5;
    o.method.freeze_text = true;
    o.model.text_init = Some(tmp.path().join("a-text-model")); // checked before it is read
    assert!(err_of(&o).contains("--text-contrastive trains the text tower"));
    let mut o = grouped_options(&tsv, &tmp.path().join("out"));
    o.method.dense_loss = lexlip_train::DenseLoss::Dcl;
    assert!(err_of(&o).contains("give --objective dense"));
    assert!(!tmp.path().join("out").exists(), "nothing written");
}
