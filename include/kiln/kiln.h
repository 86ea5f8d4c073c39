#pragma once
// kiln: a C++20 tensor library with local JIT compilation. Include this one
// header to get everything.

#include <kiln/autodiff.h>
#include <kiln/config.h>
#include <kiln/control_flow.h>
#include <kiln/creation.h>
#include <kiln/cuda.h>
#include <kiln/device.h>
#include <kiln/dtype.h>
#include <kiln/error.h>
#include <kiln/export.h>
#include <kiln/function.h>
#include <kiln/log.h>
#include <kiln/memory.h>
#include <kiln/nn.h>
#include <kiln/ops.h>
#include <kiln/random.h>
#include <kiln/shape.h>
#include <kiln/tensor.h>
#include <kiln/tensor_files.h>
