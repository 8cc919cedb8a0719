/* date.c — the Date header's IMF-fixdate. */
#include "xhttp/core/date.h"

#include <string.h>

/* Formats the IMF-fixdate of RFC 9110 §5.6.7 by hand: strftime depends on
 * the locale and costs more than we want even once a second. */
void xHttpFormatDate(char out[XHTTP_DATE_LEN + 1], time_t t) {
    static const char days[] = "SunMonTueWedThuFriSat";
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    struct tm tm;
    gmtime_r(&t, &tm);
    memcpy(out, days + 3 * tm.tm_wday, 3);
    out[3] = ',';
    out[4] = ' ';
    out[5] = (char)('0' + tm.tm_mday / 10);
    out[6] = (char)('0' + tm.tm_mday % 10);
    out[7] = ' ';
    memcpy(out + 8, months + 3 * tm.tm_mon, 3);
    out[11] = ' ';
    int year = tm.tm_year + 1900;
    for (int i = 15; i >= 12; i--, year /= 10) out[i] = (char)('0' + year % 10);
    out[16] = ' ';
    int hms[3] = {tm.tm_hour, tm.tm_min, tm.tm_sec};
    for (int i = 0; i < 3; i++) {
        out[17 + 3 * i] = (char)('0' + hms[i] / 10);
        out[18 + 3 * i] = (char)('0' + hms[i] % 10);
        out[19 + 3 * i] = i < 2 ? ':' : ' ';
    }
    memcpy(out + 26, "GMT", 4);
}
