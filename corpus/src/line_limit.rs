//! A cap on the length of one line of a text input. `BufRead::read_line` keeps reading until it
//! finds a newline, so a small gzip that expands to one 3 GB line would take 3 GB of memory
//! before any parser sees it. [`LineLimit`] fails that line instead, once it passes the cap, and
//! then skips the rest of it: a reader that treats the error as one bad item goes on with the
//! next line.

use std::io::{self, BufRead, Read};

/// The longest line the corpus and vector readers take (16 MiB: a vector line is a few KB, a
/// manifest line a few hundred bytes).
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// `inner` with lines longer than `max` bytes turned into an error (see the module docs).
pub struct LineLimit<R> {
    inner: R,
    max: usize,
    /// Bytes of the current line consumed so far.
    run: usize,
    /// 1-based number of the current line.
    line: u64,
    /// The current line was reported too long: its remaining bytes are dropped.
    skipping: bool,
}

impl<R: BufRead> LineLimit<R> {
    pub fn new(inner: R, max: usize) -> Self {
        Self {
            inner,
            max,
            run: 0,
            line: 1,
            skipping: false,
        }
    }

    /// Drops the rest of a too-long line, up to and including its newline.
    fn skip_rest(&mut self) -> io::Result<()> {
        while self.skipping {
            let buf = self.inner.fill_buf()?;
            if buf.is_empty() {
                self.skipping = false;
                self.run = 0;
                break;
            }
            let (n, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            self.inner.consume(n);
            if done {
                self.skipping = false;
                self.run = 0;
                self.line += 1;
            }
        }
        Ok(())
    }
}

impl<R: BufRead> Read for LineLimit<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = {
            let buf = self.fill_buf()?;
            let n = buf.len().min(out.len());
            out[..n].copy_from_slice(&buf[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for LineLimit<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.skip_rest()?;
        if self.run > self.max {
            self.skipping = true;
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "line {} is longer than {} bytes (the most a line may hold); it is skipped",
                    self.line, self.max
                ),
            ));
        }
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        // The bytes consumed are the front of the buffer `fill_buf` returned (no I/O happens
        // here: the buffer holds at least `amt` bytes).
        if let Ok(buf) = self.inner.fill_buf() {
            let part = &buf[..amt.min(buf.len())];
            let newlines = part.iter().filter(|&&b| b == b'\n').count();
            match part.iter().rposition(|&b| b == b'\n') {
                Some(last) => self.run = part.len() - last - 1,
                None => self.run += part.len(),
            }
            self.line += newlines as u64;
        }
        self.inner.consume(amt);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<Result<String, String>> {
        // A small inner buffer, so that lines cross buffer boundaries.
        let reader = LineLimit::new(io::BufReader::with_capacity(4, input), max);
        reader
            .lines()
            .map(|l| l.map_err(|e| e.to_string()))
            .collect()
    }

    #[test]
    fn short_lines_pass_unchanged() {
        let out = lines(b"ab\ncdef\n\nxyz", 8);
        assert_eq!(
            out,
            vec![
                Ok("ab".into()),
                Ok("cdef".into()),
                Ok(String::new()),
                Ok("xyz".into())
            ]
        );
    }

    /// A long line is one error naming it; the lines after it are read as usual.
    #[test]
    fn a_long_line_is_one_error_and_reading_goes_on() {
        let mut input = b"ok\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 100));
        input.extend_from_slice(b"\nafter\n");
        let out = lines(&input, 10);
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!(out[0], Ok("ok".into()));
        let e = out[1].clone().unwrap_err();
        assert!(e.contains("line 2 is longer than 10 bytes"), "{e}");
        assert_eq!(out[2], Ok("after".into()));
    }

    /// The memory a long line takes is bounded by the cap (plus one buffer), however long it
    /// is: the reader fails before it has read the line.
    #[test]
    fn a_long_last_line_fails_without_being_read_whole() {
        let input = vec![b'x'; 1 << 20];
        let mut reader = LineLimit::new(io::BufReader::with_capacity(1024, &input[..]), 4096);
        let mut line = String::new();
        let e = reader.read_line(&mut line).unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
        assert!(line.len() <= 4096 + 1024, "{} bytes held", line.len());
        assert_eq!(reader.read_line(&mut String::new()).unwrap(), 0);
    }
}
