//! Unit tests of the layout table (`Layouts`).

use super::*;

#[test]
fn grants_follow_gets_and_returns() {
    let p = Layouts::default();
    let f = Ino(7);
    p.grant(1, f, LayoutType::BLOCK_VOLUME, (0, 8192), IoMode::RW);
    p.grant(2, f, LayoutType::SCSI, (0, 4096), IoMode::READ);
    assert_eq!(p.type_of(1, f), Some(LayoutType::BLOCK_VOLUME));
    assert_eq!(p.type_of(2, f), Some(LayoutType::SCSI));
    assert!(p.grants_of(1, f).covers_rw(0, 8192));
    assert_eq!(p.conflicting(2, f, 0, 4096, IoMode::READ), vec![1]);
    assert!(p.conflicting(1, f, 0, 4096, IoMode::READ).is_empty());
    assert!(!p.would_empty(1, f, 0, 4096, IoMode::RW));
    assert!(p.would_empty(1, f, 0, 8192, IoMode::ANY));
    p.release(1, f, 0, 8192, IoMode::RW);
    assert!(p.grants_of(1, f).is_empty());
    p.release_client(2);
    assert!(p.grants_of(2, f).is_empty());
    p.grant(3, f, LayoutType::BLOCK_VOLUME, (0, 1), IoMode::RW);
    p.forget(&[(3, f)]);
    assert!(p.grants_of(3, f).is_empty());
}
