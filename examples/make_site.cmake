# cmake -DSOURCE=examples/site -DDEST=build/examples/site -P make_site.cmake
# Copies the site and writes style.css.gz beside style.css. The static handler serves a twin
# only when it is not older than its file, so the twin is written after the copy.
file(COPY ${SOURCE}/ DESTINATION ${DEST})
file(REMOVE ${DEST}/style.css.gz)
file(ARCHIVE_CREATE OUTPUT ${DEST}/style.css.gz PATHS ${DEST}/style.css FORMAT raw COMPRESSION GZip
     COMPRESSION_LEVEL 9)
