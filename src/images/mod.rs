//! Images: where they are counted, probed and retired.
