//! BEiT's relative position bias: the table's size for a patch grid, the index into it, and
//! LexLIP's resampling of a table to another grid.

/// Number of rows of a relative position bias table for a `w × w` patch grid.
pub fn relative_table_len(grid: usize) -> usize {
    (2 * grid - 1) * (2 * grid - 1) + 3
}

/// The grid whose table has `rows` rows, if any.
pub fn grid_of_table_len(rows: usize) -> Option<usize> {
    let side = ((rows.checked_sub(3)?) as f64).sqrt().round() as usize;
    (side % 2 == 1 && side * side + 3 == rows).then_some(side.div_ceil(2))
}

/// Pair-wise relative position index for a `grid × grid` window plus the CLS token (as HF and the
/// BEiT paper define it): `(n + 1)²` indices into the bias table, row-major.
pub fn relative_position_index(grid: usize) -> Vec<u32> {
    let n = grid * grid;
    let side = 2 * grid - 1;
    let num_rel = relative_table_len(grid);
    let mut idx = vec![0u32; (n + 1) * (n + 1)];
    for i in 0..=n {
        for j in 0..=n {
            let v = match (i, j) {
                (0, 0) => num_rel - 1,
                (0, _) => num_rel - 3,
                (_, 0) => num_rel - 2,
                _ => {
                    let (hi, wi) = ((i - 1) / grid, (i - 1) % grid);
                    let (hj, wj) = ((j - 1) / grid, (j - 1) % grid);
                    let dh = hi + grid - 1 - hj;
                    let dw = wi + grid - 1 - wj;
                    dh * side + dw
                }
            };
            idx[i * (n + 1) + j] = v as u32;
        }
    }
    idx
}

/// LexLIP's resampling of a `(rows, heads)` table to `new_rows` rows: `F.interpolate(mode="linear",
/// align_corners=False, scale_factor=(new_rows + 0.1) / rows)` along the rows, reproduced exactly
/// (the source coordinate uses `1 / scale_factor`, not `rows / new_rows`).
pub fn interpolate_table_lexlip(table: &[Vec<f32>], new_rows: usize) -> Vec<Vec<f32>> {
    let rows = table.len();
    let scale_factor = (new_rows as f64 + 0.1) / rows as f64;
    let scale = (1.0 / scale_factor) as f32;
    (0..new_rows)
        .map(|dst| {
            let src = (scale * (dst as f32 + 0.5) - 0.5).max(0.0);
            let i0 = (src.floor() as usize).min(rows - 1);
            let i1 = if i0 < rows - 1 { i0 + 1 } else { i0 };
            let l1 = (src - i0 as f32).clamp(0.0, 1.0);
            let l0 = 1.0 - l1;
            table[i0]
                .iter()
                .zip(&table[i1])
                .map(|(a, b)| l0 * a + l1 * b)
                .collect()
        })
        .collect()
}
