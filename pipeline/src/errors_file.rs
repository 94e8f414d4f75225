//! The errors file: one JSON object per skipped item, appended as the run goes. It follows the
//! resume protocol: [`ErrorsFile::checkpoint`] before each commit makes the lines written so far
//! durable and returns the file's length (saved with the commit); [`ErrorsFile::rewind`] at the
//! start of a resumed run drops the lines written after that commit, because the resumed run
//! writes them again. A resumed run's errors file is then the one a clean run writes.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{PipelineError, Result};

pub struct ErrorsFile {
    path: PathBuf,
    out: BufWriter<File>,
}

impl ErrorsFile {
    /// Opens (creating it if needed) without truncating: [`ErrorsFile::rewind`] decides what stays.
    pub fn open(path: &Path) -> Result<Self> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| PipelineError::io(path, e))?;
        let mut out = BufWriter::new(file);
        out.seek(SeekFrom::End(0))
            .map_err(|e| PipelineError::io(path, e))?;
        Ok(Self {
            path: path.to_path_buf(),
            out,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line.
    pub fn write(&mut self, line: &serde_json::Value) -> Result<()> {
        let io = |e| PipelineError::io(&self.path, e);
        serde_json::to_writer(&mut self.out, line)
            .map_err(|e| PipelineError::io(&self.path, e.into()))?;
        self.out.write_all(b"\n").map_err(io)
    }

    /// Flushes and syncs; returns the length of the file.
    pub fn checkpoint(&mut self) -> Result<u64> {
        let path = self.path.clone();
        let io = |e| PipelineError::io(&path, e);
        self.out.flush().map_err(io)?;
        self.out.get_ref().sync_data().map_err(io)?;
        Ok(self.out.get_ref().metadata().map_err(io)?.len())
    }

    /// Drops whatever follows `mark` (the length saved with the commit a run resumes from; 0 for
    /// a fresh run). A file shorter than `mark` is not this job's file (another `--errors` path
    /// than before): it is kept as it is and appended to.
    pub fn rewind(&mut self, mark: u64) -> Result<()> {
        let path = self.path.clone();
        let io = |e| PipelineError::io(&path, e);
        self.out.flush().map_err(io)?;
        let len = self.out.get_ref().metadata().map_err(io)?.len();
        if len >= mark {
            self.out.get_ref().set_len(mark).map_err(io)?;
        }
        self.out.seek(SeekFrom::End(0)).map_err(io)?;
        Ok(())
    }
}
