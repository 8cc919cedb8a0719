/* field.h — a header field as every protocol layer hands it to the exchange. */
#ifndef XHTTP_CORE_FIELD_H
#define XHTTP_CORE_FIELD_H

#include <xbase/str.h>

/** Name and value, both views into a protocol's buffer. */
typedef struct xHttpField {
    xStr name;
    xStr value;
} xHttpField;

#endif
