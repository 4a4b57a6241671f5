//! Fixed texts the passes insert. They never vary: tests and the provider prefix cache depend on them.
