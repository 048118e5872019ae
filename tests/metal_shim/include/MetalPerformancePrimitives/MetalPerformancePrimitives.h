#pragma once
#include "metal_shim.h"
