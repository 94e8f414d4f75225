use super::*;

/// LexLIP runs hash without the dense options (their checkpoints from before the dense
/// objective still resume); dense runs hash with them.
#[test]
fn fingerprint_keys_per_objective() {
    let lexlip = TrainOptions::new("out").fingerprint_json();
    assert!(lexlip.get("objective").is_none() && lexlip.get("dense_dim").is_none());
    assert_eq!(lexlip["tau"], 0.05);
    let mut o = TrainOptions::new("out");
    o.objective = Objective::Dense;
    let dense = o.fingerprint_json();
    assert_eq!(dense["objective"], "dense");
    assert_eq!(dense["dense_dim"], 256);
    o.dense_dim = 64;
    assert_ne!(o.fingerprint_json(), dense);
    // The sampler and the consistency weight hash only when set.
    assert!(lexlip.get("sampler").is_none() && lexlip.get("itc_consistency").is_none());
    let mut g = TrainOptions::new("out");
    g.sampler = Sampler::Grouped;
    g.itc_consistency = 0.2;
    let grouped = g.fingerprint_json();
    assert_eq!(grouped["sampler"], "grouped");
    assert_eq!(grouped["group_size"], 1024);
    assert_eq!(grouped["itc_consistency"], 0.2);
}
