#include "kernels-impl.h"
