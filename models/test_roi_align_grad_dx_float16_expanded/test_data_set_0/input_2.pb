
BroisJš93=FfEf@f6ÍCšGšEMFÍ<fA