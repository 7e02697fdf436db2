//! Vectors for the index's tests and benchmarks: deterministic, and clustered as a model's
//! embeddings are (families of related inputs), which is what an HNSW graph is built for.

/// Deterministic vectors shaped like a model's embeddings: `clusters` families, each a
/// random centre with members scattered around it.
#[derive(Debug, Clone)]
pub struct Clustered {
    state: u64,
    centres: Vec<Vec<f32>>,
    pub dims: usize,
}

impl Clustered {
    pub fn new(seed: u64, clusters: usize, dims: usize) -> Clustered {
        let mut made = Clustered { state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, centres: Vec::new(), dims };
        made.centres = (0..clusters).map(|_| (0..dims).map(|_| made.normal()).collect()).collect();
        made
    }

    fn uniform(&mut self) -> f32 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        ((self.state >> 40) as f32 + 0.5) / (1u64 << 24) as f32
    }

    /// A standard normal sample (Box-Muller).
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
    }

    /// The next vector: a random family's centre and a spread of 0.6 of it.
    pub fn vector(&mut self) -> Vec<f32> {
        let family = (self.uniform() * self.centres.len() as f32) as usize % self.centres.len();
        let centre = self.centres[family].clone();
        centre.into_iter().map(|c| c + 0.6 * self.normal()).collect()
    }

    /// `count` vectors, flat (one allocation, given back whole when dropped).
    pub fn flat(&mut self, count: usize) -> Vec<f32> {
        let mut flat = Vec::with_capacity(count * self.dims);
        for _ in 0..count {
            flat.extend(self.vector());
        }
        flat
    }
}
