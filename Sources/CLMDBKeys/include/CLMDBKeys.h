#ifndef TOPICSTORE_CLMDBKEYS_H
#define TOPICSTORE_CLMDBKEYS_H

#include <lmdb.h>

/// The order LMDB gives keys by default (bytes compared as unsigned, a
/// shorter key first when it is a prefix of the longer), computed eight bytes
/// at a time. Every table of topicstore uses it (`mdb_set_compare`).
int topicstore_key_order(const MDB_val *a, const MDB_val *b);

#endif
