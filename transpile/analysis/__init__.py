"""Facts about kernels: loops, def-use chains, memory effects, layouts, stage plans. Never edits a tree."""
