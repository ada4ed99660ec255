//! The Unix socket `orb serve` answers on next to TCP, for the HostFactory scripts on the
//! same machine. It serves the API without Bearer checks, so only the owner may connect:
//! the socket is bound under a temporary name, made 0600, then renamed into place, so it is
//! never reachable with wider permissions. A stale socket from a daemon that died is
//! replaced; a live one (another daemon) or a file that is not a socket is refused.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::failure::{CliResult, Failure};

/// The bound socket file; removed again when dropped (if it is still ours).
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    identity: (u64, u64),
}

impl SocketFile {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| (m.dev(), m.ino()) == self.identity);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Binds `path` (mode 0600) after clearing a stale socket. Needs a tokio runtime.
pub fn bind_owner_only(path: &Path) -> CliResult<(tokio::net::UnixListener, SocketFile)> {
    let fix = "stop it, or pass --socket PATH (or --no-socket)";
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(Failure::generic(format!(
                    "{} is in use: another process (another orb serve?) answers on it; {fix}",
                    path.display()
                )));
            }
            std::fs::remove_file(path).map_err(|e| {
                Failure::generic(format!(
                    "cannot remove the stale socket {}: {e}; remove it by hand",
                    path.display()
                ))
            })?;
        }
        Ok(_) => {
            return Err(Failure::generic(format!(
                "{} exists and is not a socket; move it away, or pass --socket PATH (or --no-socket)",
                path.display()
            )));
        }
        Err(_) => {}
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| {
            Failure::generic(format!(
                "cannot create {} for the socket: {e}",
                parent.display()
            ))
        })?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "orb.sock".into());
    let staging = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&staging);
    let cannot_bind = |e: std::io::Error| {
        Failure::generic(format!(
            "cannot listen on the socket {}: {e}; socket paths must be short (about 100 bytes) \
             and in a writable directory; pass --socket PATH or --no-socket",
            path.display()
        ))
    };
    let listener = tokio::net::UnixListener::bind(&staging).map_err(cannot_bind)?;
    let placed = std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::rename(&staging, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&staging);
        return Err(cannot_bind(e));
    }
    let meta = std::fs::symlink_metadata(path).map_err(cannot_bind)?;
    Ok((
        listener,
        SocketFile {
            path: path.to_path_buf(),
            identity: (meta.dev(), meta.ino()),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_socket_is_owner_only_replaces_a_stale_one_and_is_removed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orb.sock");
        // A stale socket: bound, then its listener gone.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let (listener, file) = bind_owner_only(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let accepted = tokio::spawn(async move { listener.accept().await.is_ok() });
        tokio::net::UnixStream::connect(&path).await.unwrap();
        assert!(accepted.await.unwrap());
        drop(file);
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn a_live_socket_or_a_regular_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orb.sock");
        let (_listener, _file) = bind_owner_only(&path).unwrap();
        let err = bind_owner_only(&path).unwrap_err();
        assert!(err.message.contains("is in use"), "{}", err.message);
        let plain = dir.path().join("notes.txt");
        std::fs::write(&plain, "keep me").unwrap();
        let err = bind_owner_only(&plain).unwrap_err();
        assert!(err.message.contains("is not a socket"), "{}", err.message);
        assert_eq!(std::fs::read_to_string(&plain).unwrap(), "keep me");
    }
}
