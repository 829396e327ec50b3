"""Operations tables and jobs: the books, the ledger of landed files, retention and erasure."""
