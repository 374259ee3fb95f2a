//! The current state, shared by readers as an immutable snapshot, and its write-through
//! persistence: a change becomes visible only once it is on disk.

use std::{
    path::PathBuf,
    sync::{Arc, Mutex, RwLock},
};

use crate::state::{State, StateFileError};

pub(crate) struct Store {
    file: Option<PathBuf>,
    durable: bool,
    /// Serializes writers, so changes reach the file in the order they were made.
    writer: Mutex<()>,
    current: RwLock<Arc<State>>,
}

impl Store {
    pub fn new(state: State, file: Option<PathBuf>, durable: bool) -> Self {
        Self {
            file,
            durable,
            writer: Mutex::new(()),
            current: RwLock::new(Arc::new(state)),
        }
    }

    /// The state file, if any.
    pub fn file(&self) -> Option<&std::path::Path> {
        self.file.as_deref()
    }

    /// Whether changes go to a file (so a change does blocking I/O).
    pub fn is_persistent(&self) -> bool {
        self.file.is_some()
    }

    /// The current state. Readers never wait for a write in progress.
    pub fn snapshot(&self) -> Arc<State> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Runs `f` on a copy of the state; if the copy changed, saves it and then publishes it.
    /// When saving fails nothing is published: the call fails and the state stays as it was.
    /// Blocks on file I/O.
    pub fn mutate<T>(&self, f: impl FnOnce(&mut State) -> T) -> Result<T, StateFileError> {
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.snapshot();
        let mut next = State::clone(&current);
        let out = f(&mut next);
        if next != *current {
            if let Some(path) = &self.file {
                next.save(path, self.durable)?;
            }
            *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
        }
        Ok(out)
    }

    /// Writes the current state (at start, so the seeded state and its generated ids survive).
    pub fn save_now(&self) -> Result<(), StateFileError> {
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        match &self.file {
            Some(path) => self.snapshot().save(path, self.durable),
            None => Ok(()),
        }
    }
}
