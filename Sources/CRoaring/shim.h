#include <roaring/roaring.h>
