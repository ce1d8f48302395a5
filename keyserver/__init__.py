"""The key-management server: keys, offline encryption, noised decryption, privacy ledger."""
