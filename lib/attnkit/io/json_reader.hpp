// Reading tensors and bundles from JSON text (docs/tensor-format.md): the parser of one document
// or of a stream (io/json_parser.hpp) and the readers of files and standard input
// (io/record_reader.hpp).
#pragma once
#include "attnkit/io/json_parser.hpp"
#include "attnkit/io/record_reader.hpp"
