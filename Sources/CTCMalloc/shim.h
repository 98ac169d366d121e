#include <gperftools/tcmalloc.h>
