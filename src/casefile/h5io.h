#pragma once
// Generic HDF5 access for tensors: the reader (h5_reader.h: list, read, attributes) and the
// writer (h5_writer.h: H5Writer, atomic).
#include "casefile/h5_reader.h"
#include "casefile/h5_writer.h"
