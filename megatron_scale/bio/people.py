"""Seeded, offline synthetic people: a unique full name and six attributes.

The attribute values are chosen so that the first word of every value differs within its
attribute (first-token accuracy then tells the values apart), and each employer has one
headquarters city (the employer city, as in the paper's bioS data).
"""

# ruff: noqa: SIM905  (word lists read best as one string each)
from __future__ import annotations

import random
from dataclasses import dataclass

ATTRIBUTES = ("birth_date", "birth_city", "university", "major", "employer", "employer_city")

FIRST_NAMES = (
    "Aaron Abigail Adrian Alice Amelia Andre Angela Ariel Arthur Audrey Beatrice Benjamin Bianca Boris "
    "Caleb Camila Carmen Cedric Chloe Clara Colin Damian Daniel Daphne Delia Derek Diana Dominic Edgar "
    "Elena Elias Eliza Emil Emma Erik Esther Ethan Felix Fiona Flora Gabriel Gemma George Grace Hannah "
    "Harold Hazel Hector Helena Henry Ian Ingrid Irene Isaac Ivan Jacob Jasper Julia Kevin Lara Leon "
    "Lillian Lucas Lydia Marcus Martin Maya Miles Nadia Nathan Nina Noah Olga Oliver Oscar Paige Paula "
    "Peter Philip Quentin Rachel Ralph Rebecca Robin Rosa Ruth Samuel Sarah Selena Simon Sofia Stella "
    "Tobias Ursula Victor Violet Walter Wendy Xavier Yvonne Zachary Zoe"
).split()
MIDDLE_NAMES = (
    "Alan Beth Carl Dawn Dean Eve Faye Glen Hope Jay Jean June Kai Kay Lane Lee Lynn Mae Max Neil Paul "
    "Quinn Ray Reed Rose Ross Sage Scott Seth Shay Tess Troy Wade West Wynn"
).split()
LAST_NAMES = (
    "Abbott Acosta Baxter Bennett Blackwell Bradford Calloway Carver Chandler Crawford Dalton Delgado "
    "Donovan Drummond Ellison Emerson Fairbanks Farrell Fletcher Galloway Garrison Gilmore Hadley Halloway "
    "Harrington Hawthorne Ingram Irwin Jennings Kensington Kimball Langley Lockhart Lowell Maddox Mercer "
    "Montague Norwood Oakley Ortega Pemberton Prescott Quimby Radcliffe Ramsey Redford Rutherford "
    "Sanderson Sinclair Stafford Sterling Thornton Tolliver Underwood Valentine Vance Wakefield Whitaker "
    "Winslow Yardley Zimmerman Ashford Beaumont Caldwell Davenport Everett Fontaine Greenwood Holloway "
    "Kingsley Lancaster Morrison Nightingale Pennington Rockwell Somerset Thorne Wellington Whitfield"
).split()
MONTHS = ("January February March April May June July August September October November December").split()
CITIES = (
    "Boston Chicago Seattle Denver Atlanta Houston Phoenix Portland Miami Dallas Austin Nashville "
    "Baltimore Cleveland Detroit Memphis Pittsburgh Sacramento Tucson Omaha Raleigh Richmond Buffalo "
    "Honolulu Anchorage Albuquerque Milwaukee Minneapolis Louisville Charlotte Orlando Tampa Madison "
    "Spokane Boise Reno Fresno Savannah Charleston Burlington Toronto Vancouver Montreal London Paris "
    "Berlin Madrid Rome Vienna Prague Dublin Lisbon Oslo Stockholm Helsinki Warsaw Athens Zurich Geneva "
    "Munich Hamburg Barcelona Milan Amsterdam Brussels Copenhagen Edinburgh Manchester Tokyo Osaka Seoul "
    "Busan Beijing Shanghai Singapore Sydney Melbourne Auckland Mumbai Delhi Bangkok Jakarta Manila Cairo "
    "Nairobi Lagos Lima Bogota Santiago"
).split()
UNIVERSITIES = tuple(f"{w} University" for w in (
    "Stanford Harvard Princeton Yale Columbia Cornell Brown Duke Rice Emory Tufts Purdue Baylor Temple "
    "Auburn Clemson Drexel Fordham Gonzaga Howard Lehigh Marquette Northeastern Northwestern Pepperdine "
    "Rutgers Syracuse Tulane Vanderbilt Villanova Wesleyan Creighton Brandeis Bucknell Colgate Dartmouth "
    "Hofstra Loyola Seton Stetson Wake Xavier Oxford Cambridge Heidelberg Leiden Uppsala Kyoto Tsinghua "
    "Monash McGill Aarhus Bologna Sorbonne"
).split())
MAJORS = (
    "Mathematics Physics Chemistry Biology Economics Philosophy History Linguistics Astronomy Geology "
    "Sociology Psychology Anthropology Architecture Accounting Finance Marketing Journalism Music Theater "
    "Nursing Pharmacy Statistics Ecology Genetics Neuroscience Oceanography Agriculture Forestry Robotics "
    "Cryptography Literature Musicology Archaeology Criminology Dentistry Veterinary Zoology Botany "
    "Meteorology Epidemiology Photography Sculpture Choreography Theology Geography Astrophysics "
    "Biochemistry Metallurgy Horticulture"
).split()
EMPLOYERS = tuple(f"{w} {kind}" for w, kind in zip((
    "Acme Apex Beacon Bluestone Brightwater Cascade Cobalt Crescent Evergreen Falcon Frontier Granite "
    "Harbor Horizon Ironwood Juniper Keystone Lighthouse Meridian Monarch Nimbus Northwind Orchid Pinnacle "
    "Quartz Redwood Sapphire Silverline Summit Tidewater Trident Vertex Willow Zenith Aurora Compass "
    "Driftwood Emberly Foxglove Glacier Hemlock Ivory Jasmine Kestrel Lumen Magnolia Nova Obsidian"
).split(), ("Labs", "Systems", "Corporation", "Industries", "Group") * 20))


@dataclass(frozen=True)
class Person:
    name: str
    birth_date: str
    birth_city: str
    university: str
    major: str
    employer: str
    employer_city: str

    def attribute(self, key: str) -> str:
        return getattr(self, key)


def headquarters(employer: str) -> str:
    """The employer's city: a fixed function of the employer (seed-independent)."""
    return CITIES[(EMPLOYERS.index(employer) * 7 + 3) % len(CITIES)]


def max_people() -> int:
    return len(FIRST_NAMES) * len(MIDDLE_NAMES) * len(LAST_NAMES)


def generate_people(n: int, seed: int) -> list[Person]:
    """`n` people with distinct names; the same list for the same (n, seed), and a prefix of the
    list for a larger n with the same seed."""
    if not 0 <= n <= max_people():
        raise ValueError(f"--people {n}: this generator has {max_people()} distinct names")
    rng = random.Random(seed)
    seen: set[str] = set()
    people: list[Person] = []
    while len(people) < n:
        name = f"{rng.choice(FIRST_NAMES)} {rng.choice(MIDDLE_NAMES)} {rng.choice(LAST_NAMES)}"
        date = f"{rng.choice(MONTHS)} {rng.randint(1, 28)}, {rng.randint(1900, 2099)}"
        city, uni, major, employer = (rng.choice(CITIES), rng.choice(UNIVERSITIES), rng.choice(MAJORS),
                                      rng.choice(EMPLOYERS))
        if name in seen:
            continue
        seen.add(name)
        people.append(Person(name, date, city, uni, major, employer, headquarters(employer)))
    return people
