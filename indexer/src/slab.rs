//! A read-only array that is either owned on the heap or a view into a file mapped in memory,
//! so that the forward index can be searched straight from its segment file (no copy, no heap:
//! the pages belong to the OS cache) and built in memory the same way where there is no file.

use std::ops::Deref;

use tantivy::directory::OwnedBytes;

/// Element types a [`Slab`] can view in a file: plain little-endian integers, valid for every
/// bit pattern.
pub trait Plain: Copy + Send + Sync + 'static {
    fn from_le(bytes: &[u8]) -> Self;
}

impl Plain for u8 {
    fn from_le(b: &[u8]) -> Self {
        b[0]
    }
}

impl Plain for u16 {
    fn from_le(b: &[u8]) -> Self {
        u16::from_le_bytes([b[0], b[1]])
    }
}

impl Plain for u32 {
    fn from_le(b: &[u8]) -> Self {
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}

enum Owner<T> {
    Heap(#[allow(dead_code)] Box<[T]>),
    Mapped(#[allow(dead_code)] OwnedBytes),
}

/// `len` values of `T` at `ptr`, kept alive by `owner` (a boxed slice's data does not move when
/// the box does; an [`OwnedBytes`] keeps its mapping alive). Reading is a plain slice access.
pub struct Slab<T> {
    ptr: *const T,
    len: usize,
    owner: Owner<T>,
}

// SAFETY: a `Slab` only ever reads its values, which its owner (itself `Send + Sync`: a boxed
// slice of `Send + Sync` values or reference-counted immutable bytes) keeps alive and unchanged.
unsafe impl<T: Send + Sync> Send for Slab<T> {}
// SAFETY: as above; no interior mutability.
unsafe impl<T: Send + Sync> Sync for Slab<T> {}

impl<T: Plain> Slab<T> {
    /// The values stored little-endian in `bytes`: viewed in place where the bytes are aligned
    /// for `T` on a little-endian machine, copied otherwise. `None` if the length is not a
    /// multiple of `T`'s size.
    pub fn from_le_bytes(bytes: OwnedBytes) -> Option<Self> {
        let size = std::mem::size_of::<T>();
        if !bytes.len().is_multiple_of(size) {
            return None;
        }
        let len = bytes.len() / size;
        let ptr = bytes.as_slice().as_ptr();
        if cfg!(target_endian = "little")
            && (ptr as usize).is_multiple_of(std::mem::align_of::<T>())
        {
            return Some(Self {
                ptr: ptr.cast(),
                len,
                owner: Owner::Mapped(bytes),
            });
        }
        Some(
            bytes
                .as_slice()
                .chunks_exact(size)
                .map(T::from_le)
                .collect(),
        )
    }
}

impl<T> Slab<T> {
    /// Bytes of heap this slab holds (a view into a file holds none).
    pub fn heap_bytes(&self) -> usize {
        match self.owner {
            Owner::Heap(_) => self.len * std::mem::size_of::<T>(),
            Owner::Mapped(_) => 0,
        }
    }
}

impl<T> From<Box<[T]>> for Slab<T> {
    fn from(values: Box<[T]>) -> Self {
        Self {
            ptr: values.as_ptr(),
            len: values.len(),
            owner: Owner::Heap(values),
        }
    }
}

impl<T> From<Vec<T>> for Slab<T> {
    fn from(values: Vec<T>) -> Self {
        values.into_boxed_slice().into()
    }
}

impl<T> FromIterator<T> for Slab<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        iter.into_iter().collect::<Box<[T]>>().into()
    }
}

impl<T> Deref for Slab<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points at `len` initialized values of `T` (a boxed slice's, or bytes
        // checked for length and alignment, every bit pattern being a valid `T`), which `owner`
        // keeps alive and unchanged for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Slab<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view and a copy read the same values, whatever the alignment of the bytes.
    #[test]
    fn views_and_copies_read_the_same_values() {
        let bytes: Vec<u8> = (0..400u32).map(|i| (i * 37 % 251) as u8).collect();
        let all = OwnedBytes::new(bytes);
        for skip in [0, 2, 4, 6] {
            let part = all.slice(skip..skip + (all.len() - skip) / 4 * 4);
            let aligned = (part.as_slice().as_ptr() as usize).is_multiple_of(4);
            let slab = Slab::<u32>::from_le_bytes(part.clone()).unwrap();
            let want: Vec<u32> = part
                .as_slice()
                .chunks_exact(4)
                .map(<u32 as Plain>::from_le)
                .collect();
            assert_eq!(&slab[..], &want[..]);
            // A view where it can be (no heap), a copy where it cannot.
            assert_eq!(
                slab.heap_bytes() == 0,
                aligned && cfg!(target_endian = "little")
            );
        }
        let wide = Slab::<u16>::from_le_bytes(all.slice(1..9)).unwrap();
        assert_eq!(wide.len(), 4);
        assert!(Slab::<u32>::from_le_bytes(all.slice(1..4)).is_none());
        let heap: Slab<u8> = vec![1u8, 2, 3].into();
        assert_eq!((&heap[..], heap.heap_bytes()), (&[1u8, 2, 3][..], 3));
    }
}
